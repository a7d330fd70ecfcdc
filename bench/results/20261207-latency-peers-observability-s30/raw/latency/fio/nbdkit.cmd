nbdkit -f -r --exit-with-parent -U /tmp/latency.gTwvu3/nbdkit.sock file /var/tmp/ubcache-bench/run/latency-cache.img cache=none
