/var/tmp/ubcache-bench/run/bin.9yQZPl/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.PLhZGQ/mem.sock
