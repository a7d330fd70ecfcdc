/var/tmp/ubcache-bench/run/bin.UmIFBl/bench/nbd_min_responder /tmp/datapath.5eneQK/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
