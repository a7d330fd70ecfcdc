/var/tmp/ubcache-bench/run/bin.5Riwol/ubcache serve --backing /var/tmp/ubcache-bench/run/latency-file.img --read-only --nbd unix:/tmp/latency.ML4ezh/file.sock
