/var/tmp/ubcache-bench/run/bin.HsyZXp/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.EZplys/file.sock
