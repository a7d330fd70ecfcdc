nbdkit -f -r --exit-with-parent -U /tmp/latency.ehn8qW/nbdkit.sock file /var/tmp/ubcache-bench/run/latency-cache.img cache=none
