nbdkit -f --exit-with-parent -U /tmp/datapath.PLhZGQ/null.sock null 1073741824
