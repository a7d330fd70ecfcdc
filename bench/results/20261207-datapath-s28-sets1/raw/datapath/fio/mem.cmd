/var/tmp/ubcache-bench/run/bin.ug0Xu6/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.yxmz1N/mem.sock
