/var/tmp/ubcache-bench/run/bin.xH5BJJ/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.vhIaxB/file.sock
