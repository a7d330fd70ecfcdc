#!/usr/bin/env bash
# scaling — how does throughput grow with clients on a real filesystem?
# Not yet implemented (issue 12): dbench 1..128 clients on ext4 made on
# the ubcache export through nbdfuse + losetup.
set -euo pipefail
. "$(dirname "$0")/common.sh"
suite_not_implemented "dbench 1..128 clients on ext4 over the ubcache export (nbdfuse + losetup)"
