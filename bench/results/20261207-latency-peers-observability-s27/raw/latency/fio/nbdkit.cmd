nbdkit -f -r --exit-with-parent -U /tmp/latency.qfzTIo/nbdkit.sock file /var/tmp/ubcache-bench/run/latency-cache.img cache=none
