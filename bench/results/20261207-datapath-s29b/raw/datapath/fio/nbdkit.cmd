nbdkit -f --exit-with-parent -U /tmp/datapath.4wAaBp/nbdkit.sock memory 1073741824
