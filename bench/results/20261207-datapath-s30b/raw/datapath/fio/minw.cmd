/work/build-bench/bench/nbd_min_responder --write /tmp/datapath.vhIaxB/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
