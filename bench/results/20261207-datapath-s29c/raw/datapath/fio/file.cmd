/var/tmp/ubcache-bench/run/bin.XiRfoK/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.yQpLUj/file.sock
