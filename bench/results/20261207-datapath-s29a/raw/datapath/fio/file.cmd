/var/tmp/ubcache-bench/run/bin.BvAIKH/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.PnYwBB/file.sock
