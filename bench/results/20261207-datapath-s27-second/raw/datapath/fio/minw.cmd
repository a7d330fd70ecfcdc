/var/tmp/ubcache-bench/run/bin.HsyZXp/bench/nbd_min_responder --write /tmp/datapath.EZplys/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
