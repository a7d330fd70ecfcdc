nbdkit -f --exit-with-parent -U /tmp/datapath.EZplys/nbdkit.sock memory 1073741824
