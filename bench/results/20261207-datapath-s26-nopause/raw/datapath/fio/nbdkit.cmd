nbdkit -f --exit-with-parent -U /tmp/datapath.FFPuon/nbdkit.sock memory 1073741824
