nbdkit -f --exit-with-parent -U /tmp/datapath.yxmz1N/null.sock null 1073741824
