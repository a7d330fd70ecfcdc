qemu-nbd --read-only --cache=none --aio=io_uring --format=raw --shared=8 --persistent --socket=/tmp/datapath.12nXG9/qemu-nbd.sock /var/tmp/ubcache-bench/run/datapath-data.img
