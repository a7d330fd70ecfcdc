/var/tmp/ubcache-bench/run/bin.xH5BJJ/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.vhIaxB/mem.sock
