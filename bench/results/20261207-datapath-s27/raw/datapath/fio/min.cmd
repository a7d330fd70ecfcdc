/var/tmp/ubcache-bench/run/bin.jseUFo/bench/nbd_min_responder /tmp/datapath.boC5zq/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
