/var/tmp/ubcache-bench/run/bin.kFedxJ/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.vaBYKD/mem.sock
