#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 129-crash-watchdog — the crash harness's watchdog fires on a daemon that
# stops answering, and reports why: the harness (crash_lib.sh) serves its
# devices as 120 does, SIGSTOPs the daemon and runs a guarded `ctl get`; the
# watchdog must fail that step within a few seconds with every thread's
# state (the journal thread stopped) and gdb stack (frames in ubcache::)
# in the log. Without it a hang in 120 ran into ctest's timeout with no
# trace of where the daemon was (issue 29 item 7).
#
# ctest: label crash
CRASH_POWERCUT=0
CRASH_DEFAULT_CYCLES=0
CRASH_WATCHDOG_SELFCHECK=1
source "$(dirname "$0")/crash_lib.sh"
crash_main
log "ok"
