nbdkit -f --exit-with-parent -U /tmp/datapath.vhIaxB/null.sock null 1073741824
