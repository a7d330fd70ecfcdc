nbdkit -f --exit-with-parent -U /tmp/datapath.GKsy5F/null.sock null 1073741824
