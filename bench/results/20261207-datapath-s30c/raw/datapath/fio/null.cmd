nbdkit -f --exit-with-parent -U /tmp/datapath.xeLs92/null.sock null 1073741824
