/work/build-bench/bench/nbd_min_responder /tmp/datapath.g6Xxtq/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
