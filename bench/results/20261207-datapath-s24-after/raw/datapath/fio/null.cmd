nbdkit -f --exit-with-parent -U /tmp/datapath.kR1VpT/null.sock null 1073741824
