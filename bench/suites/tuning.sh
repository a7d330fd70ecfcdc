#!/usr/bin/env bash
# tuning — what do bcache's defaults cost, and which knob buys it back?
# Not yet implemented (issue 12): sysbench fileio rndrw at 4 and 48 threads
# and fio randrw on the backing alone, the cache alone, ubcache untuned
# (bcache defaults), tuned (congested thresholds 0 + sequential_cutoff 0),
# each knob alone, and ubcache as shipped; configurations alternated A B A B.
set -euo pipefail
. "$(dirname "$0")/common.sh"
suite_not_implemented "sysbench fileio rndrw 4/48 threads + fio randrw: backing alone, cache alone, ubcache untuned (bcache defaults), tuned (congested thresholds 0 + sequential_cutoff 0), each knob alone, as shipped"
