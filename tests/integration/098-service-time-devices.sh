#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 098-service-time-devices — the backing devices ubcache measures are told
# apart by their numbers alone (issue 13, "know the devices"), and auto
# congestion decides from those numbers, not from the spec strings.
# Three backing devices behind one cache, each served in turn:
#  - spindle: `sas:` over a sparse file (seeks of milliseconds, ~150 MB/s);
#  - slow link: an NBD export over a slow link — nbdkit's file plugin
#    behind its delay filter (50 ms each way) and rate filter (40 Mbit/s);
#  - fast store: an NBD export of nbdkit's memory plugin, no delay.
# On each, fio reads at QD1: 4 KiB random reads over the whole device
# (misses, so they measure the backing device) beside 4 KiB reads of a
# 64 KiB region (hits after the first pass, so they measure the cache),
# then 1 MiB random reads alone (a spindle serves one request at a time:
# beside the 4 KiB ones, each would also time the other's queue). The
# cache device is slowed to 20 ms per I/O (fault: latency): an SSD stuck
# behind a deep queue. Asserted, from `ctl get backing_read_us/4k` and
# `/1m` only:
#  - 4 KiB: fast store < 2 ms < spindle < 20 ms, slow link > 40 ms;
#  - what a 1 MiB read adds to a 4 KiB one (the transfer): on the slow link
#    more than 100 ms (40 Mbit/s), on the spindle and the fast store less
#    than 30 ms;
#  - auto congestion: in front of the slow link (50 ms > 20 ms) no read
#    bypasses; in front of the fast store and the spindle (both faster
#    than the stuck cache) the hot reads bypass.
# The table goes to the log.
# ctest: run alone
source "$(dirname "$0")/lib.sh"

CACHE=$WORK/cache.img
SPINDLE=$WORK/spindle.img
LINKED=$WORK/linked.img
truncate -s 8G "$SPINDLE" "$LINKED"

get() { ctl get "$1"; }

NBDKIT_PID=""
stop_nbdkit() {
  [[ -z $NBDKIT_PID ]] && return 0
  kill "$NBDKIT_PID" 2>/dev/null || true
  wait "$NBDKIT_PID" 2>/dev/null || true
  NBDKIT_PID=""
}
on_exit stop_nbdkit

# nbdkit_start SOCKET ARGS... — nbdkit in the foreground of a background job.
nbdkit_start() {
  local sock=$1; shift
  rm -f "$sock"
  nbdkit -f -U "$sock" "$@" 2>>"$WORK/nbdkit.log" &
  NBDKIT_PID=$!
  local deadline=$((SECONDS + 20))
  until [[ -S $sock ]]; do
    kill -0 "$NBDKIT_PID" 2>/dev/null || fail "nbdkit $* did not start: $(cat "$WORK/nbdkit.log")"
    ((SECONDS < deadline)) || fail "nbdkit $* did not create $sock"
    sleep 0.05
  done
}

# measure LABEL BACKING_SPEC — sets M4 M1 (the backing device's 4k and 1m
# read times, us), MC (the cache's 4k read time) and MB (reads bypassed).
measure() {
  local label=$1 backing=$2
  truncate -s 0 "$CACHE"
  truncate -s 256M "$CACHE"
  start_server --cache "fault,latency_us=20000:$CACHE" --backing "$backing" --nbd "unix:$SOCK" \
    --control "$CTL_SOCK" --congested-write-threshold-us 0
  local rc=0 before after
  before=$(($(get stats_total/cache_bypass_hits) + $(get stats_total/cache_bypass_misses)))
  (cd "$WORK" && timeout 180 fio --ioengine=nbd --uri="$(nbd_uri)" --rw=randread --iodepth=1 \
    --time_based --runtime="${STEP_SECONDS:-4}" --randrepeat=0 --output=/dev/null \
    --name=miss4k --bs=4k --offset=1G --size=7G \
    --name=hot --bs=4k --offset=0 --size=64k \
    --name=miss1m --stonewall --bs=1M --offset=1G --size=7G) 2>"$WORK/fio.stderr" || rc=$?
  [[ $rc -eq 0 ]] || fail "$label: fio exited $rc: $(tail -n 20 "$WORK/fio.stderr")"
  after=$(($(get stats_total/cache_bypass_hits) + $(get stats_total/cache_bypass_misses)))
  M4=$(get backing_read_us/4k) M1=$(get backing_read_us/1m) MC=$(get cache_read_us/4k) MB=$((after - before))
  log "$label: backing 4k $M4 us, 1m $M1 us; cache 4k $MC us; $MB reads bypassed" \
    "(auto_congested_bypasses $(get auto_congested_bypasses))"
  stop_server
}

# lt A B — A < B, for the decimal numbers ctl prints.
lt() { python3 -c "import sys; sys.exit(0 if float('$1') < float('$2') else 1)"; }

measure spindle "sas:$SPINDLE"
S4=$M4 S1=$M1 SC=$MC SB=$MB

nbdkit_start "$WORK/link.sock" --filter=rate --filter=delay file "$LINKED" \
  rdelay=50ms wdelay=50ms rate=40M burstiness=0.05
measure "slow link" "nbd:nbd+unix:///?socket=$WORK/link.sock"
L4=$M4 L1=$M1 LC=$MC LB=$MB
stop_nbdkit

nbdkit_start "$WORK/fast.sock" memory 8G
measure "fast store" "nbd:nbd+unix:///?socket=$WORK/fast.sock"
F4=$M4 F1=$M1 FC=$MC FB=$MB
stop_nbdkit

log "device     | read 4k us | read 1m us | 1m - 4k us | cache 4k us | bypassed reads"
log "fast store | $F4 | $F1 | $(python3 -c "print(round($F1 - $F4))") | $FC | $FB"
log "spindle    | $S4 | $S1 | $(python3 -c "print(round($S1 - $S4))") | $SC | $SB"
log "slow link  | $L4 | $L1 | $(python3 -c "print(round($L1 - $L4))") | $LC | $LB"

# 4 KiB service times order the devices.
lt "$F4" 2000 || fail "the fast store's 4k reads measured $F4 us (want < 2 ms)"
lt 2000 "$S4" && lt "$S4" 20000 || fail "the spindle's 4k reads measured $S4 us (want 2-20 ms: a seek)"
lt 40000 "$L4" || fail "the slow link's 4k reads measured $L4 us (want > 40 ms: its 50 ms delay)"
# The transfer: what a 1 MiB read costs beyond a 4 KiB one.
lt 100000 "$(python3 -c "print($L1 - $L4)")" ||
  fail "a 1m read over the slow link cost only $L1 us against $L4 us for 4k (40 Mbit/s: want > 100 ms more)"
lt "$(python3 -c "print($S1 - $S4)")" 30000 || fail "a 1m read on the spindle cost $S1 us against $S4 us for 4k"
lt "$(python3 -c "print($F1 - $F4)")" 30000 || fail "a 1m read from the fast store cost $F1 us against $F4 us for 4k"
# Auto congestion, from the same numbers.
((LB == 0)) || fail "$LB reads bypassed a cache at ~20 ms in front of a 50 ms link"
((FB > 0)) || fail "no read bypassed a cache stuck at ~20 ms in front of a fast store ($F4 us)"
((SB > 0)) || fail "no read bypassed a cache stuck at ~20 ms in front of a spindle ($S4 us)"
log "PASS"
