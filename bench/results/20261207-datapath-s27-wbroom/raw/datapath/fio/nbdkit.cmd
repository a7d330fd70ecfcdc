nbdkit -f --exit-with-parent -U /tmp/datapath.J8aBbH/nbdkit.sock memory 1073741824
