/var/tmp/ubcache-bench/run/bin.BvAIKH/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.PnYwBB/mem.sock
