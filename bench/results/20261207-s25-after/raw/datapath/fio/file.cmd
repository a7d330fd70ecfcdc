/var/tmp/ubcache-bench/run/bin.5Riwol/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.Q8qTP5/file.sock
