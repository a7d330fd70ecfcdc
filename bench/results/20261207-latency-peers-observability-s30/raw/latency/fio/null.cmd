nbdkit -f --exit-with-parent -U /tmp/latency.gTwvu3/null.sock null 268435456
