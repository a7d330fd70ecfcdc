/var/tmp/ubcache-bench/run/bin.9yQZPl/bench/nbd_min_responder --write /tmp/datapath.PLhZGQ/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
