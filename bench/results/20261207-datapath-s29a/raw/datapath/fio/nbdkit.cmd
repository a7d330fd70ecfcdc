nbdkit -f --exit-with-parent -U /tmp/datapath.PnYwBB/nbdkit.sock memory 1073741824
