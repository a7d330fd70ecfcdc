/var/tmp/ubcache-bench/run/bin.562BIH/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.0nNY5x/mem.sock
