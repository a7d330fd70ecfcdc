/work/build-bench/bench/nbd_min_responder /tmp/datapath.mYE7EE/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
