/work/build-bench/bench/nbd_min_responder --write --spin-us 0 /tmp/datapath.12nXG9/minw0.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
