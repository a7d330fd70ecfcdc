nbdkit -f --exit-with-parent -U /tmp/latency.qfzTIo/null.sock null 268435456
