nbdkit -f --exit-with-parent -U /tmp/datapath.PLhZGQ/nbdkit.sock memory 1073741824
