/var/tmp/ubcache-bench/run/bin.yC1reP/ubcache serve --backing mem:1073741824 --nbd unix:/tmp/datapath.g6Xxtq/mem.sock
