/var/tmp/ubcache-bench/run/bin.yC1reP/ubcache serve --backing /var/tmp/ubcache-bench/run/datapath-data.img --read-only --nbd unix:/tmp/datapath.g6Xxtq/file.sock
