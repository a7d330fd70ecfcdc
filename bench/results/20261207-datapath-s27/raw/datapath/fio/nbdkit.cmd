nbdkit -f --exit-with-parent -U /tmp/datapath.boC5zq/nbdkit.sock memory 1073741824
