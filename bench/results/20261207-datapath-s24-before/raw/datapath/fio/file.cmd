/var/tmp/ubcache-bench/run/bin.562BIH/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.0nNY5x/file.sock
