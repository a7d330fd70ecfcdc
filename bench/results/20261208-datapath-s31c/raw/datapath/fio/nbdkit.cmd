nbdkit -f --exit-with-parent -U /tmp/datapath.12nXG9/nbdkit.sock memory 1073741824
