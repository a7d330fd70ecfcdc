/var/tmp/ubcache-bench/run/bin.zb9vWI/bench/nbd_min_responder --write /tmp/datapath.FFPuon/minw.sock /var/tmp/ubcache-bench/run/datapath-min-write.img
