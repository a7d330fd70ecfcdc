/var/tmp/ubcache-bench/run/bin.ze7H3C/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.kKqj3J/file.sock
