/var/tmp/ubcache-bench/run/bin.5Riwol/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.Q8qTP5/mem.sock
