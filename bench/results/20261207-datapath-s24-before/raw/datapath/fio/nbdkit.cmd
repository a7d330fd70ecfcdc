nbdkit -f --exit-with-parent -U /tmp/datapath.0nNY5x/nbdkit.sock memory 1073741824
