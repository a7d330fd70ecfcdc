nbdkit -f --exit-with-parent -U /tmp/datapath.kKqj3J/nbdkit.sock memory 1073741824
