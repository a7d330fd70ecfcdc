nbdkit -f --exit-with-parent -U /tmp/datapath.vaBYKD/nbdkit.sock memory 1073741824
