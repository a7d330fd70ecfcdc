/var/tmp/ubcache-bench/run/bin.zwibY9/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.4wAaBp/file.sock
