nbdkit -f --exit-with-parent -U /tmp/datapath.g6Xxtq/nbdkit.sock memory 1073741824
