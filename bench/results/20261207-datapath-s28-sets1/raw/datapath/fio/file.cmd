/var/tmp/ubcache-bench/run/bin.ug0Xu6/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.yxmz1N/file.sock
