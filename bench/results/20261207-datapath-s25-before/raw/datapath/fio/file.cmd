/var/tmp/ubcache-bench/run/bin.UmIFBl/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.5eneQK/file.sock
