/var/tmp/ubcache-bench/run/bin.BYcNfF/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.xeLs92/file.sock
