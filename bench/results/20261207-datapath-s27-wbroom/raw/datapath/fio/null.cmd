nbdkit -f --exit-with-parent -U /tmp/datapath.J8aBbH/null.sock null 1073741824
