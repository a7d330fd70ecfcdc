/var/tmp/ubcache-bench/run/bin.zb9vWI/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.FFPuon/file.sock
