/var/tmp/ubcache-bench/run/bin.AGLJoD/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.RGhi1Z/file.sock
