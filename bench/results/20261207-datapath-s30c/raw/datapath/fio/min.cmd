/work/build-bench/bench/nbd_min_responder /tmp/datapath.xeLs92/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
