/var/tmp/ubcache-bench/run/bin.nw21B9/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.EVmQ6o/file.sock
