/var/tmp/ubcache-bench/run/bin.kFedxJ/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.vaBYKD/file.sock
