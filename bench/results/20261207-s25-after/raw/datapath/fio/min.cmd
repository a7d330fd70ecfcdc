/var/tmp/ubcache-bench/run/bin.5Riwol/bench/nbd_min_responder /tmp/datapath.Q8qTP5/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
