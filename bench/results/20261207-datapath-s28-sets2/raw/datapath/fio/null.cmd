nbdkit -f --exit-with-parent -U /tmp/datapath.IGfV0d/null.sock null 1073741824
