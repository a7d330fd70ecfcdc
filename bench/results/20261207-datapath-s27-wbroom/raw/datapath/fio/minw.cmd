/var/tmp/ubcache-bench/run/bin.bwyjdH/bench/nbd_min_responder --write /tmp/datapath.J8aBbH/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
