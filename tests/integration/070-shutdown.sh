#!/usr/bin/env bash
# 070-shutdown — SIGTERM under load (fio on 4 connections) stops the server
# with exit 0 within a few seconds, and on a file backing every write the
# clients saw acknowledged is in the file; SIGINT when idle likewise; a bad
# device spec or a missing --nbd/--backing exits 2 with one error line.
source "$(dirname "$0")/lib.sh"

# --- SIGTERM while fio writes through 4 connections.
start_server --backing mem:256M --nbd "unix:$SOCK"
fio --ioengine=nbd --uri="$(nbd_uri)" --name=load --rw=randrw --bs=4k --bssplit=4k/50:64k/50 \
  --iodepth=32 --numjobs=4 --size=64M --offset_increment=64M --time_based --runtime=60 \
  --output="$WORK/fio.out" >/dev/null 2>&1 &
FIO_PID=$!
on_exit "kill $FIO_PID"
sleep 3
kill -0 "$FIO_PID" 2>/dev/null || fail "fio did not start: $(cat "$WORK/fio.out")"
server_alive "under fio load"
t0=$(date +%s%N)
STOP_TIMEOUT=5 stop_server TERM
log "server exited $(( ($(date +%s%N) - t0) / 1000000 )) ms after SIGTERM under load"
# The clients notice: fio ends (with errors) instead of hanging.
for _ in $(seq 100); do kill -0 "$FIO_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$FIO_PID" 2>/dev/null && fail "fio still running 10 s after the server exited"
wait "$FIO_PID" || true

# --- SIGTERM with a file backing: acknowledged writes are in the file.
img=$WORK/backing.img
truncate -s 64M "$img"
random_file "$WORK/src.img" 64
start_server --backing "$img" --nbd "unix:$SOCK"
timeout 120 nbdcopy --connections=4 "$WORK/src.img" "$(nbd_uri)" || fail "nbdcopy into the file export failed"
stop_server TERM
cmp "$WORK/src.img" "$img" || fail "backing file lacks acknowledged writes after SIGTERM"

# --- SIGINT when idle, and with an open idle connection.
start_server --backing mem:16M --nbd "unix:$SOCK"
nbdsh -u "$(nbd_uri)" -c 'import time; h.pwrite(b"x" * 512, 0); time.sleep(30)' >/dev/null 2>&1 &
NBDSH_PID=$!
on_exit "kill $NBDSH_PID"
sleep 1
STOP_TIMEOUT=5 stop_server INT
kill "$NBDSH_PID" 2>/dev/null || true
wait "$NBDSH_PID" 2>/dev/null || true

# --- Bad command lines: exit status 2, one error line, no socket left.
# expect_exit2 WHAT NEEDLE ARGS... — NEEDLE must appear in the single line.
expect_exit2() {
  local what=$1 needle=$2; shift 2
  local err=$WORK/err.txt rc=0
  rm -f "$SOCK"
  timeout 20 "$UBCACHE" serve "$@" >"$WORK/out.txt" 2>"$err" </dev/null || rc=$?
  [[ $rc -eq 2 ]] || fail "$what: exit status $rc, expected 2 (stderr: $(cat "$err"))"
  local lines
  lines=$(grep -c . "$err" || true)
  [[ $lines -eq 1 ]] || fail "$what: expected exactly one error line on stderr, got $lines:
$(cat "$err")"
  [[ -z $needle ]] || grep -qF -- "$needle" "$err" || fail "$what: error line does not name '$needle': $(cat "$err")"
  [[ ! -e $SOCK ]] || fail "$what: left a socket behind"
}
expect_exit2 "unknown device type" "bogus:xyz" --backing bogus:xyz --nbd "unix:$SOCK"
expect_exit2 "missing file" "$WORK/no-such-file.img" --backing "$WORK/no-such-file.img" --nbd "unix:$SOCK"
expect_exit2 "mem: without a size" "mem:" --backing mem: --nbd "unix:$SOCK"
expect_exit2 "mem: with a bad size" "mem:12Q" --backing mem:12Q --nbd "unix:$SOCK"
expect_exit2 "missing --nbd" "" --backing mem:16M
expect_exit2 "missing --backing" "" --nbd "unix:$SOCK"
expect_exit2 "bad --nbd address" "bogus:1" --backing mem:16M --nbd bogus:1
