/var/tmp/ubcache-bench/run/bin.Zlmq8s/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.Pakatr/file.sock
