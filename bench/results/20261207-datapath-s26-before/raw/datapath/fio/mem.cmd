/var/tmp/ubcache-bench/run/bin.Zlmq8s/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.Pakatr/mem.sock
