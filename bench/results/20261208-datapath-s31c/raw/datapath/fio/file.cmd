/var/tmp/ubcache-bench/run/bin.honxxM/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.12nXG9/file.sock
