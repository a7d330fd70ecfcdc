nbdkit -f --exit-with-parent -U /tmp/datapath.kKqj3J/null.sock null 1073741824
