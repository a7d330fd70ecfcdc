/var/tmp/ubcache-bench/run/bin.BYcNfF/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.xeLs92/mem.sock
