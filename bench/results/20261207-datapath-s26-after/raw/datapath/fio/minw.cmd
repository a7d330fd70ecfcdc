/var/tmp/ubcache-bench/run/bin.AGLJoD/bench/nbd_min_responder --write /tmp/datapath.RGhi1Z/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
