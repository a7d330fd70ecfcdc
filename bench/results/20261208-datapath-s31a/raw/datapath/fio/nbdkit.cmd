nbdkit -f --exit-with-parent -U /tmp/datapath.GKsy5F/nbdkit.sock memory 1073741824
