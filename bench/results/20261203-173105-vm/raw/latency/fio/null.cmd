nbdkit -f --exit-with-parent -U /tmp/latency.G6ZI7l/null.sock null 268435456
