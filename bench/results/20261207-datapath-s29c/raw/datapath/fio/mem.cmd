/var/tmp/ubcache-bench/run/bin.XiRfoK/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.yQpLUj/mem.sock
