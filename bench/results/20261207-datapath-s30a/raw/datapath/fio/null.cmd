nbdkit -f --exit-with-parent -U /tmp/datapath.vaBYKD/null.sock null 1073741824
