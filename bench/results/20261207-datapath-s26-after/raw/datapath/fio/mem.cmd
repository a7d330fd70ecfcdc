/var/tmp/ubcache-bench/run/bin.AGLJoD/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.RGhi1Z/mem.sock
