/var/tmp/ubcache-bench/run/bin.bwyjdH/bench/nbd_min_responder /tmp/datapath.J8aBbH/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
