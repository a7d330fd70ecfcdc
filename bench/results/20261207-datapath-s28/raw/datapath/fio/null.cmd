nbdkit -f --exit-with-parent -U /tmp/datapath.mYE7EE/null.sock null 1073741824
