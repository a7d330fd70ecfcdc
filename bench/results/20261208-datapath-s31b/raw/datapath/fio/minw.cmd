/work/build-bench/bench/nbd_min_responder --write /tmp/datapath.g6Xxtq/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
