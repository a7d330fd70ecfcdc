#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 070-shutdown — SIGTERM under load (fio on 4 connections) stops the server
# with exit 0 within a few seconds, and on a file backing every write the
# clients saw acknowledged is in the file; SIGINT when idle likewise; a bad
# device spec or a missing --nbd/--backing exits 2 with one error line.
source "$(dirname "$0")/lib.sh"

# --- SIGTERM while fio writes through 4 connections.
start_server --backing mem:256M --nbd "unix:$SOCK"
(cd "$WORK" && exec fio --ioengine=nbd --uri="$(nbd_uri)" --verify_state_save=0 --name=load --rw=randrw --bs=4k --bssplit=4k/50:64k/50 \
  --iodepth=32 --numjobs=4 --size=64M --offset_increment=64M --time_based --runtime=60 \
  --output="$WORK/fio.out") >/dev/null 2>&1 &
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

# --- SIGTERM while one client stalls after half a request header and
# another after the greeting: neither may hold up the exit.
start_server --backing mem:16M --nbd "unix:$SOCK"
python3 - "$SOCK" <<'PY' &
import socket, struct, sys, time
a = socket.socket(socket.AF_UNIX); a.connect(sys.argv[1])
a.recv(18); a.sendall(struct.pack(">I", 3))
a.sendall(struct.pack(">QII", 0x49484156454F5054, 7, 6) + b"\0\0\0\0\0\0")   # GO ""
time.sleep(0.5)
a.recv(4096)
a.sendall(struct.pack(">IHHQ", 0x25609513, 0, 0, 1)[:10])   # half a READ header
b = socket.socket(socket.AF_UNIX); b.connect(sys.argv[1]); b.recv(18)
print("stalled", flush=True)
time.sleep(30)
PY
STALL_PID=$!
on_exit "kill $STALL_PID"
sleep 1.5
kill -0 "$STALL_PID" 2>/dev/null || fail "the stalling client did not start"
STOP_TIMEOUT=5 stop_server TERM
kill "$STALL_PID" 2>/dev/null || true
wait "$STALL_PID" 2>/dev/null || true

# --- Bad command lines: exit status 2, one error line, no socket left.
# expect_exit2 WHAT MAXLINES NEEDLE ARGS... — NEEDLE must appear in the first line.
expect_exit2() {
  local what=$1 maxlines=$2 needle=$3; shift 3
  local err=$WORK/err.txt rc=0
  rm -f "$SOCK"
  timeout 20 "$UBCACHE" serve "$@" >"$WORK/out.txt" 2>"$err" </dev/null || rc=$?
  [[ $rc -eq 2 ]] || fail "$what: exit status $rc, expected 2 (stderr: $(cat "$err"))"
  local lines
  lines=$(grep -c . "$err" || true)
  [[ $lines -ge 1 && $lines -le $maxlines ]] || fail "$what: expected 1..$maxlines error lines on stderr, got $lines:
$(cat "$err")"
  grep -m1 . "$err" | grep -qF -- "$needle" || fail "$what: the error line does not name '$needle': $(cat "$err")"
  [[ ! -e $SOCK ]] || fail "$what: left a socket behind"
}
# A bad device spec: exactly one line, naming the spec.
expect_exit2 "unknown device type" 1 "bogus:xyz" --backing bogus:xyz --nbd "unix:$SOCK"
expect_exit2 "missing file" 1 "$WORK/no-such-file.img" --backing "$WORK/no-such-file.img" --nbd "unix:$SOCK"
expect_exit2 "mem: without a size" 1 "mem:" --backing mem: --nbd "unix:$SOCK"
expect_exit2 "mem: with a bad size" 1 "mem:12Q" --backing mem:12Q --nbd "unix:$SOCK"
# Usage errors: the error line (naming the option) may be followed by a hint.
expect_exit2 "missing --nbd" 2 "--nbd" --backing mem:16M
expect_exit2 "missing --backing" 2 "--backing" --nbd "unix:$SOCK"
expect_exit2 "bad --nbd address" 2 "bogus:1" --backing mem:16M --nbd bogus:1
