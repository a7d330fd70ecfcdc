qemu-nbd --read-only --cache=none --aio=io_uring --format=raw --shared=8 --persistent --socket=/tmp/latency.gTwvu3/qemu-nbd.sock /var/tmp/ubcache-bench/run/latency-cache.img
