nbdkit -f --exit-with-parent -U /tmp/datapath.PnYwBB/null.sock null 1073741824
