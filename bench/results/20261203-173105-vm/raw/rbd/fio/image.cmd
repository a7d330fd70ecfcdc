/var/tmp/ubcache-bench/run/bin.6l8AHd/ubcache serve --backing rbd,conf=/var/tmp/ubcache-bench/run/rbd-ceph/ceph.conf:rbd/plain --nbd unix:/tmp/rbd.6OSOOy/image.sock
