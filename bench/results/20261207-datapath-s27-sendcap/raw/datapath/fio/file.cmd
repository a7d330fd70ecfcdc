/var/tmp/ubcache-bench/run/bin.9yQZPl/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.PLhZGQ/file.sock
