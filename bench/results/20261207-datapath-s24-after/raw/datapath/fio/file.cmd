/var/tmp/ubcache-bench/run/bin.yWXNS7/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.kR1VpT/file.sock
