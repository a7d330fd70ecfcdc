/work/build-bench/bench/nbd_min_responder --write /tmp/datapath.4wAaBp/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
