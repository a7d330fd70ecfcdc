/var/tmp/ubcache-bench/run/bin.honxxM/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.12nXG9/mem.sock
