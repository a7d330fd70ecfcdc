/var/tmp/ubcache-bench/run/bin.nw21B9/bench/nbd_min_responder /tmp/datapath.EVmQ6o/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
