/var/tmp/ubcache-bench/run/bin.zb9vWI/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.FFPuon/mem.sock
