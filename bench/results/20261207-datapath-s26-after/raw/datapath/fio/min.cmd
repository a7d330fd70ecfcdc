/var/tmp/ubcache-bench/run/bin.AGLJoD/bench/nbd_min_responder /tmp/datapath.RGhi1Z/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
