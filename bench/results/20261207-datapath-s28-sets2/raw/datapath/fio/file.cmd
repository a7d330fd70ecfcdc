/var/tmp/ubcache-bench/run/bin.ZttKtX/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.IGfV0d/file.sock
