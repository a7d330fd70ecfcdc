nbdkit -f --exit-with-parent -U /tmp/datapath.RGhi1Z/null.sock null 1073741824
