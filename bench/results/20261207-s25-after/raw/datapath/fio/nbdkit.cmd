nbdkit -f --exit-with-parent -U /tmp/datapath.Q8qTP5/nbdkit.sock memory 1073741824
