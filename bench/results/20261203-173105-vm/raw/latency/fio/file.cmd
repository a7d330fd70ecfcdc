/var/tmp/ubcache-bench/run/bin.6l8AHd/ubcache serve --backing /var/tmp/ubcache-bench/run/latency-file.img --read-only --nbd unix:/tmp/latency.G6ZI7l/file.sock
