/var/tmp/ubcache-bench/run/bin.0Pj4vM/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.mYE7EE/mem.sock
