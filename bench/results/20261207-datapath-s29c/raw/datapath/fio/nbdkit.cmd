nbdkit -f --exit-with-parent -U /tmp/datapath.yQpLUj/nbdkit.sock memory 1073741824
