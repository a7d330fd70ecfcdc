/var/tmp/ubcache-bench/run/bin.zb9vWI/bench/nbd_min_responder /tmp/datapath.FFPuon/min.sock /var/tmp/ubcache-bench/run/datapath-data.img
