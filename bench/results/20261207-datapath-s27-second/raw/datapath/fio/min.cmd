/var/tmp/ubcache-bench/run/bin.HsyZXp/bench/nbd_min_responder /tmp/datapath.EZplys/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
