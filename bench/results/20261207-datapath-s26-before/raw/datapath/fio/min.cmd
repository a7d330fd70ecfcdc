/work/build-bench/bench/nbd_min_responder /tmp/datapath.Pakatr/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
