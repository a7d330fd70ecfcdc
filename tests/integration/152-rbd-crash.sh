#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 152-rbd-crash — 120's kill -9 crash harness over an `rbd:` backing: a
# formatted cache file in front of an RBD image on a one-node Ceph cluster
# (tests/ceph/cluster.sh, started by the harness), in writeback. After each
# kill -9 the daemon is started again on the same cache and image: it waits
# for the killed daemon's exclusive lock (freed once the cluster times the
# dead client's watch out; 5 s in this cluster), recovers, and every
# acknowledged write reads back exactly, flushed or not, with the cache
# warm. Kill modes, the rule and every CRASH_* variable: crash_lib.sh.
#
#   UBCACHE=build/ubcache bash tests/integration/152-rbd-crash.sh                  # CI: 10 cycles
#   UBCACHE=build/ubcache CRASH_CYCLES=100 bash tests/integration/152-rbd-crash.sh # the long mode
#
# ctest: label crash
# ctest: cost 300
CRASH_POWERCUT=0
CRASH_BACKING=rbd
CRASH_KNOBS=${CRASH_KNOBS:-journal_delay_ms=100}
CRASH_DEFAULT_CYCLES=10
source "$(dirname "$0")/crash_lib.sh"
crash_main
