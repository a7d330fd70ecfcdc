/var/tmp/ubcache-bench/run/bin.zwibY9/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.4wAaBp/mem.sock
