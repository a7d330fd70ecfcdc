/work/build-bench/bench/nbd_min_responder --write /tmp/datapath.xeLs92/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
