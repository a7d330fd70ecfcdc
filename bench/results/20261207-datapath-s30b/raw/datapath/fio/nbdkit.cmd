nbdkit -f --exit-with-parent -U /tmp/datapath.vhIaxB/nbdkit.sock memory 1073741824
