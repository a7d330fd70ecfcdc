/var/tmp/ubcache-bench/run/bin.bwyjdH/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.J8aBbH/mem.sock
