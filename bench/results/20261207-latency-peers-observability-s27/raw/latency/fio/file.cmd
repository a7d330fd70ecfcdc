/var/tmp/ubcache-bench/run/bin.HWq0Qn/ubcache serve --backing /var/tmp/ubcache-bench/run/latency-file.img --read-only --nbd unix:/tmp/latency.qfzTIo/file.sock
