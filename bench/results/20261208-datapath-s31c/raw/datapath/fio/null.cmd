nbdkit -f --exit-with-parent -U /tmp/datapath.12nXG9/null.sock null 1073741824
