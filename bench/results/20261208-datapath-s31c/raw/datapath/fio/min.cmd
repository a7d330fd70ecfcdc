/work/build-bench/bench/nbd_min_responder /tmp/datapath.12nXG9/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
