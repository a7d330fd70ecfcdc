#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 126-writeback-powercut-soft — 121's power cuts where soft journal entries
# are exposed: a 1 GiB cache, which the cycles never fill (so no bucket
# reclaim journals generations, whose PREFLUSH would make every soft entry
# before it durable), and journal_delay_ms at its default of 100 ms (so the
# acknowledgements rest on soft commits for up to 100 ms). A cut then often
# keeps a soft entry and loses data it points at, or the reverse; replay
# must stop at the first entry whose checked data does not hash right, and
# the verification (crash_writer.py) is the same as 121's. The summary line
# "replay ended at a soft entry whose data the cut lost" counts how often
# that path ran (typically 1 or 2 in 10 cuts; 0 is legal, not a failure).
#
# By hand: UBCACHE=build/ubcache bash tests/integration/126-writeback-powercut-soft.sh
#   (CRASH_CYCLES=200 for a long run; every CRASH_* knob of crash_lib.sh applies).
#
# ctest: label crash
# ctest: label sanitized
# ctest: cost 300
# CRASH_NARROW=1 as in 121 (see there).
: "${CRASH_NARROW:=1}"
export CRASH_NARROW
CRASH_POWERCUT=1
CRASH_DEFAULT_CYCLES=10
CRASH_CACHE_SIZE=${CRASH_CACHE_SIZE:-1G}
CRASH_KNOBS=${CRASH_KNOBS:-journal_delay_ms=100}
source "$(dirname "$0")/crash_lib.sh"
crash_main
