/var/tmp/ubcache-bench/run/bin.njB4Oj/ubcache serve --backing /var/tmp/ubcache-bench/run/latency-file.img --read-only --nbd unix:/tmp/latency.gTwvu3/file.sock
