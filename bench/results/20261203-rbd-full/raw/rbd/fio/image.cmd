/var/tmp/ubcache-bench/run/bin.ryKHJb/ubcache serve --backing rbd,conf=/var/tmp/ubcache-bench/run/rbd-ceph/ceph.conf:rbd/plain --nbd unix:/tmp/rbd.SNRJLE/image.sock
