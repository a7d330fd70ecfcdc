nbdkit -f --exit-with-parent -U /tmp/datapath.g6Xxtq/null.sock null 1073741824
