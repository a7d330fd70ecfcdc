nbdkit -f --exit-with-parent -U /tmp/datapath.EZplys/null.sock null 1073741824
