/var/tmp/ubcache-bench/run/bin.jseUFo/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.boC5zq/mem.sock
