/var/tmp/ubcache-bench/run/bin.HsyZXp/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.EZplys/mem.sock
