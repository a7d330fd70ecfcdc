/var/tmp/ubcache-bench/run/bin.6B5Xwv/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.GKsy5F/file.sock
