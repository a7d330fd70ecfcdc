/work/build-bench/bench/nbd_min_responder --write /tmp/datapath.12nXG9/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
