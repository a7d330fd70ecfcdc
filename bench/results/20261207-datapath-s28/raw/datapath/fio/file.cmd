/var/tmp/ubcache-bench/run/bin.0Pj4vM/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.mYE7EE/file.sock
