nbdkit -f --exit-with-parent -U /tmp/datapath.mYE7EE/nbdkit.sock memory 1073741824
