nbdkit -f --exit-with-parent -U /tmp/datapath.FFPuon/null.sock null 1073741824
