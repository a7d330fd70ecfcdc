nbdkit -f --exit-with-parent -U /tmp/datapath.5eneQK/null.sock null 1073741824
