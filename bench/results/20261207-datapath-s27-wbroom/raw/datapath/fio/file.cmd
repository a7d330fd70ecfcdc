/var/tmp/ubcache-bench/run/bin.bwyjdH/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.J8aBbH/file.sock
