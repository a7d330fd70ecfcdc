#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 114-ctl-long-commands — commands that take long never delay other clients'
# statistics reads, and one connection's replies stay in request order.
# The backing device answers every I/O after 1.5 s (fault latency), so
# `ctl flush` (a flush of the backing device) and `ctl set cache_mode`
# (a backing superblock write) each take at least that long:
#  - while a flush runs, `ctl get` / `ctl stats` / `ctl metrics` from other
#    connections answer at once (each < 500 ms on its own connection;
#    before, each waited for the flush), and the flush is still running
#    when they are done;
#  - pipelined on one connection, `set sequential_cutoff 1M` (run by the
#    worker) then `get sequential_cutoff` (a read) are answered in order,
#    the get seeing the new value; a `set cache_mode` pipelined before a
#    `get cache_mode` likewise;
#  - a client that sends `flush` and hangs up at once costs nothing: the
#    control thread does not spin while the flush runs, and the daemon
#    answers the next client;
#  - in writeback, with 60 epochs dirty (each a backing write and flush of
#    0.25 s or more to write back) and writeback_running 0: a `ctl flush`
#    killed after 3 s stops draining (the daemon logs it; dirty data stays
#    put, where it went on to drain it all before), and SIGTERM during a
#    `ctl flush` ends the daemon within 10 s (it waited for the whole
#    drain: 273 s in a repro).
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

CACHE=$WORK/cache.img
BACKING=$WORK/backing.img
truncate -s 256M "$CACHE"
truncate -s 64M "$BACKING"
"$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --label disk >/dev/null 2>&1 || fail "format"
start_server --cache "$CACHE" --backing "fault,latency_us=1500000:$BACKING" --nbd "unix:$SOCK" \
  --control "$CTL_SOCK"

SIZE=$(ctl get size) || fail "ctl get size"

# ---- reads are answered while a flush runs ----
# Each read is timed on its own new connection from one python process, so
# the bound measures the daemon, not the start-up of a new (sanitized) ctl
# process on a loaded machine; the ctl tool then runs reads once more, for
# function, while the flush still runs.
t0=$(date +%s%N)
ctl flush >"$WORK/flush.out" 2>&1 &
FLUSH=$!
sleep 0.05
python3 - "$CTL_SOCK" "$(dirname "$0")" <<'EOF' || fail "a read was delayed while a flush ran (a long command must not delay reads)"
import sys, time
sys.path.insert(0, sys.argv[2])
from ctl_wire import request
for cmd in ["get size", "stats", "metrics", "priority-stats", "get sequential_cutoff"]:
    t = time.monotonic()
    kind, payload = request(sys.argv[1], cmd)
    ms = (time.monotonic() - t) * 1000
    print(f"[114-ctl-long-commands] {cmd}: {kind} in {ms:.0f} ms during the flush", file=sys.stderr)
    if kind != "ok":
        sys.exit(f"{cmd}: {payload}")
    if ms >= 500:
        sys.exit(f"{cmd} took {ms:.0f} ms while a flush ran")
EOF
kill -0 $FLUSH 2>/dev/null || fail "the flush ended before the timed reads did: it did not overlap them (backing latency not applied?)"
for cmd in "get size" "stats"; do
  # shellcheck disable=SC2086
  ctl $cmd >/dev/null || fail "ctl $cmd failed while a flush ran"
done
wait $FLUSH || fail "ctl flush failed: $(cat "$WORK/flush.out")"
flush_ms=$((($(date +%s%N) - t0) / 1000000))
log "flush took $flush_ms ms: $(tail -n 1 "$WORK/flush.out")"
((flush_ms >= 1500)) || fail "the flush took $flush_ms ms, less than one backing I/O (1.5 s)"

# ---- one connection: replies in request order ----
python3 - "$CTL_SOCK" <<'EOF' || fail "pipelined requests on one connection"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
reqs = ["set sequential_cutoff 1M", "get sequential_cutoff", "set cache_mode writearound", "get cache_mode",
        "set sequential_cutoff 4M", "get sequential_cutoff"]
s.sendall(b"".join(f"ubcache-ctl/1 {r}\n".encode() for r in reqs))
buf, frames = b"", []
while len(frames) < len(reqs):
    nl = buf.find(b"\n")
    if nl >= 0:
        kind, n = buf[:nl].split(b" ")
        end = nl + 1 + int(n)
        if len(buf) >= end:
            if kind != b"progress":
                frames.append((kind.decode(), buf[nl + 1:end].decode().strip()))
            buf = buf[end:]
            continue
    chunk = s.recv(65536)
    if not chunk:
        sys.exit(f"closed after {frames}")
    buf += chunk
want = [("ok", "sequential_cutoff 1048576"), ("ok", "1048576"), ("ok", "cache_mode writearound"),
        ("ok", "writearound"), ("ok", "sequential_cutoff 4194304"), ("ok", "4194304")]
if frames != want:
    sys.exit(f"replies {frames}, want {want}")
EOF
[[ $(ctl get cache_mode) == writearound ]] || fail "cache_mode after the pipelined set: $(ctl get cache_mode)"

# ---- a client that hangs up during a long command ----
ctl_tid=""
for t in /proc/$SERVER_PID/task/*; do
  [[ $(cat "$t/comm") == ub-control ]] && ctl_tid=${t##*/}
done
[[ -n $ctl_tid ]] || fail "no ub-control thread in the daemon"
cpu() { awk '{print $14 + $15}' "/proc/$SERVER_PID/task/$ctl_tid/stat"; }
c0=$(cpu)
python3 - "$CTL_SOCK" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(b"ubcache-ctl/1 flush\n")
s.close()
EOF
sleep 1
c1=$(cpu)
log "control thread: $((c1 - c0)) ticks of CPU in the second after a client hung up on a flush"
((c1 - c0 < 20)) || fail "the control thread used $((c1 - c0)) ticks in 1 s after a client hung up during a flush (spinning?)"
[[ $(ctl get size) == "$SIZE" ]] || fail "ctl get size after the hangup: $(ctl get size), want $SIZE"
server_alive "after a client hung up during a flush"
stop_server

# ---- a drain nobody waits for stops ----
# A slower backing device than above would make each epoch's pass outlast
# the checks: 0.25 s per I/O, 60 epochs (a pass each: its writes, then a
# backing flush), so a drain takes 30 s or more.
start_server --cache "$CACHE" --backing "fault,latency_us=250000:$BACKING" --nbd "unix:$SOCK" \
  --control "$CTL_SOCK" --cache-mode writeback --set writeback_running=0
args=()
for ((i = 0; i < 60; i++)); do args+=(-c "write -P $((i + 1)) $((i * 1048576 % (48 << 20))) 4k" -c flush); done
qemu-io -f raw "nbd+unix:///?socket=$SOCK" "${args[@]}" >"$WORK/qemu-io.out" 2>&1 ||
  fail "qemu-io writes: $(tail -n 3 "$WORK/qemu-io.out")"
d0=$(ctl get dirty_data)
rc=0
timeout 3 "$UBCACHE" ctl --control "$CTL_SOCK" flush >"$WORK/flush2.out" 2>&1 || rc=$?
((rc == 124)) || fail "ctl flush of 60 slow epochs ended within 3 s (rc $rc): $(tail -n 2 "$WORK/flush2.out")"
for ((i = 0; i < 100; i++)); do grep -q "flush .*cancelled" "$SERVER_LOG" && break; sleep 0.1; done
grep -q "flush .*cancelled" "$SERVER_LOG" || fail "no 'flush … cancelled' in the server log 10 s after the flush's client was killed"
sleep 3  # the pass in flight ends (its writes, flush and a superblock record: ~1.5 s at 0.25 s per I/O)
d1=$(ctl get dirty_data)
sleep 3  # several epochs' worth of writeback
d2=$(ctl get dirty_data)
log "dirty_data $d0 before the flush, $d1 once its client was killed, $d2 3 s later"
((d1 > 0)) || fail "the killed flush drained everything anyway"
((d2 == d1)) || fail "writeback went on draining after the flush's client was killed ($d1 -> $d2 bytes dirty; writeback_running 0)"
ctl flush >"$WORK/flush3.out" 2>&1 &
FLUSH=$!
sleep 2
t0=$SECONDS
STOP_TIMEOUT=10 stop_server
log "SIGTERM during a ctl flush: the daemon exited in $((SECONDS - t0)) s"
wait $FLUSH && fail "the ctl flush interrupted by SIGTERM reported success: $(cat "$WORK/flush3.out")"
true
