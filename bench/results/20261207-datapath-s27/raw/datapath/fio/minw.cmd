/var/tmp/ubcache-bench/run/bin.jseUFo/bench/nbd_min_responder --write /tmp/datapath.boC5zq/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
