nbdkit -f --exit-with-parent -U /tmp/datapath.yQpLUj/null.sock null 1073741824
