qemu-nbd --read-only --cache=none --aio=io_uring --format=raw --shared=8 --persistent --socket=/tmp/datapath.g6Xxtq/qemu-nbd.sock /var/tmp/ubcache-bench/run/datapath-data.img
