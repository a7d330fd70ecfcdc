nbdkit -f --exit-with-parent -U /tmp/datapath.4wAaBp/null.sock null 1073741824
