/work/build-bench/bench/nbd_min_responder /tmp/datapath.GKsy5F/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
