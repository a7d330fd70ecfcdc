/var/tmp/ubcache-bench/run/bin.yWXNS7/bench/nbd_min_responder /tmp/datapath.kR1VpT/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
