nbdkit -f --exit-with-parent -U /tmp/datapath.RGhi1Z/nbdkit.sock memory 1073741824
