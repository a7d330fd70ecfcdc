/var/tmp/ubcache-bench/run/bin.yWXNS7/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.kR1VpT/mem.sock
