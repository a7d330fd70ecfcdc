nbdkit -f --exit-with-parent -U /tmp/datapath.0nNY5x/null.sock null 1073741824
