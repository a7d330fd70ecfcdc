nbdkit -f --exit-with-parent -U /tmp/datapath.5eneQK/nbdkit.sock memory 1073741824
