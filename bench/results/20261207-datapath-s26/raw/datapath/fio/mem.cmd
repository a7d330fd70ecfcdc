/var/tmp/ubcache-bench/run/bin.nw21B9/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.EVmQ6o/mem.sock
