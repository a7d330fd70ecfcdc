nbdkit -f --exit-with-parent -U /tmp/latency.ML4ezh/null.sock null 268435456
