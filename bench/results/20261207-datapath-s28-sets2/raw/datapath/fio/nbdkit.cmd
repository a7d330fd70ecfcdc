nbdkit -f --exit-with-parent -U /tmp/datapath.IGfV0d/nbdkit.sock memory 1073741824
