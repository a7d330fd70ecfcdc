nbdkit -f --exit-with-parent -U /tmp/datapath.EVmQ6o/null.sock null 1073741824
