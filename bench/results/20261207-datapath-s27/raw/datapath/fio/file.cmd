/var/tmp/ubcache-bench/run/bin.jseUFo/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.boC5zq/file.sock
