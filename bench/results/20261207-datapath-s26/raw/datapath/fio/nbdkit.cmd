nbdkit -f --exit-with-parent -U /tmp/datapath.EVmQ6o/nbdkit.sock memory 1073741824
