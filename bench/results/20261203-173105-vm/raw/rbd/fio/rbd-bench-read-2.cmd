rbd -c /var/tmp/ubcache-bench/run/rbd-ceph/ceph.conf bench --io-type read --io-size 4096 --io-threads 32 --io-total 81920000 --io-pattern rand rbd/plain
