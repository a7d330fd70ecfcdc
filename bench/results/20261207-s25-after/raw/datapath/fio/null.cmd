nbdkit -f --exit-with-parent -U /tmp/datapath.Q8qTP5/null.sock null 1073741824
