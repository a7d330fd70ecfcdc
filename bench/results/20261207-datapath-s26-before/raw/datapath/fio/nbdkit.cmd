nbdkit -f --exit-with-parent -U /tmp/datapath.Pakatr/nbdkit.sock memory 1073741824
