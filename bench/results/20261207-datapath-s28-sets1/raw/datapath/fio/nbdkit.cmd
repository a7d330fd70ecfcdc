nbdkit -f --exit-with-parent -U /tmp/datapath.yxmz1N/nbdkit.sock memory 1073741824
