nbdkit -f -r --exit-with-parent -U /tmp/latency.G6ZI7l/nbdkit.sock file /var/tmp/ubcache-bench/run/latency-cache.img cache=none
