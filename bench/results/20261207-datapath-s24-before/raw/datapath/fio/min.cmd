/var/tmp/ubcache-bench/run/bin.562BIH/bench/nbd_min_responder /tmp/datapath.0nNY5x/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
