/var/tmp/ubcache-bench/run/bin.ZttKtX/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.IGfV0d/mem.sock
