nbdkit -f --exit-with-parent -U /tmp/datapath.kR1VpT/nbdkit.sock memory 1073741824
