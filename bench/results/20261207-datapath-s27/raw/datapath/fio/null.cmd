nbdkit -f --exit-with-parent -U /tmp/datapath.boC5zq/null.sock null 1073741824
