/var/tmp/ubcache-bench/run/bin.9yQZPl/bench/nbd_min_responder /tmp/datapath.PLhZGQ/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
