#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 120-writeback-crash — kill -9 of the daemon in writeback, many cycles, and
# after each restart: every acknowledged write reads back exactly, flushed or
# not (the devices keep what they were given, so a crash of the daemon alone
# may lose only the requests in flight: CRASH_ACKED_DURABLE=0 checks the
# weaker FLUSH/FUA rule of 121 instead), no block holds anything never
# written to it or torn, and the cache is warm (hits on blocks durable at
# the kill). journal_delay_ms keeps its default (100 ms), so acknowledgements
# rest on soft journal commits, not on timed ones.
# Devices: a formatted cache file and a formatted backing file behind the
# SAS model (`--cache FILE --backing sas:FILE --cache-mode writeback`). The
# harness is tests/integration/crash_lib.sh (its header: what a cycle does,
# every CRASH_* variable); the writer and the verifier, and the exact rule
# they check, are crash_writer.py.
#
# By hand (from the source tree, after building build/ubcache):
#   UBCACHE=build/ubcache bash tests/integration/120-writeback-crash.sh                  # CI: 20 cycles
#   UBCACHE=build/ubcache CRASH_CYCLES=500 bash tests/integration/120-writeback-crash.sh # the long mode
#   CRASH_SEED=N (printed by every run) repeats a run's kill modes and delays and the
#   writer's choices (the kill still lands wherever the daemon is at that moment);
#   CRASH_KEEP=1 keeps the work dir under /var/tmp; CRASH_REQUIRE_WARM=0 checks the data only.
#
# ctest: label crash
# ctest: label sanitized
# ctest: cost 400
CRASH_POWERCUT=0
CRASH_KNOBS=${CRASH_KNOBS:-journal_delay_ms=100}
CRASH_DEFAULT_CYCLES=20
source "$(dirname "$0")/crash_lib.sh"
crash_main
