/var/tmp/ubcache-bench/run/bin.UmIFBl/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.5eneQK/mem.sock
