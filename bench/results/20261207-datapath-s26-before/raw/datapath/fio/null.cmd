nbdkit -f --exit-with-parent -U /tmp/datapath.Pakatr/null.sock null 1073741824
