/var/tmp/ubcache-bench/run/bin.ze7H3C/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.kKqj3J/mem.sock
