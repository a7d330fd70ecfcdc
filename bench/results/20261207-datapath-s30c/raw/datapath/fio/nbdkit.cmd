nbdkit -f --exit-with-parent -U /tmp/datapath.xeLs92/nbdkit.sock memory 1073741824
