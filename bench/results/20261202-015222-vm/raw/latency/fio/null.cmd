nbdkit -f --exit-with-parent -U /tmp/latency.ehn8qW/null.sock null 268435456
