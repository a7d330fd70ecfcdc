/var/tmp/ubcache-bench/run/bin.6B5Xwv/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.GKsy5F/mem.sock
