/var/tmp/ubcache-bench/run/bin.nw21B9/bench/nbd_min_responder --write /tmp/datapath.EVmQ6o/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
