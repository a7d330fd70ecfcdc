#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 071-nbd-handover — NBD clients across restarts of a daemon run as the
# unit runs it (--recover auto), by hand (no service manager): each stop
# leaves the listening sockets, Unix and TCP, open in a keeper process and
# the next start takes them over ("taken over from the previous server")
# and replays no journal record. While no daemon runs, a client that
# connects is not refused: it waits in the backlog and gets its data once
# the next daemon is up. Clients read the whole time, reconnecting when a
# stop closes their connection, and every read returns what was written
# before the first restart. `ubcache stop --delete` is the final stop:
# nothing keeps the sockets, a client is refused, no keeper is left.
source "$(dirname "$0")/lib.sh"

format_cache_backing 64M 128M
random_file "$WORK/src.img" 16
PORT=$(free_tcp_port)
CTL=$WORK/ctl.sock
ARGS=(--cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --nbd "tcp:127.0.0.1:$PORT"
      --control "$CTL" --recover auto)
N=0
start() {  # the next daemon; its socket file is the kept one, not removed
  N=$((N + 1))
  LOG=$WORK/serve.$N.log
  "$UBCACHE" serve "${ARGS[@]}" 2>"$LOG" &
  PID=$!
  on_exit "kill -9 $PID 2>/dev/null"  # no keeper after a failure
  for _ in $(seq 300); do
    grep -q 'serving export' "$LOG" && [[ -S $CTL ]] && return
    kill -0 $PID 2>/dev/null || fail "serve $N exited: $(tail -n 5 "$LOG")"
    sleep 0.1
  done
  fail "serve $N not serving after 30 s"
}
stopped() {  # the daemon $PID exited 0 and left a keeper
  local rc=0
  wait $PID || rc=$?
  [[ $rc -eq 0 ]] || fail "serve $N exited $rc: $(tail -n 5 "$LOG")"
  local keeper
  keeper=$(sed -n 's/.*listening sockets stay open in process \([0-9]*\),.*/\1/p' "$LOG")
  [[ -n $keeper ]] || fail "serve $N left no keeper: $(tail -n 5 "$LOG")"
  on_exit "kill $keeper 2>/dev/null"
  kill -0 "$keeper" 2>/dev/null || fail "the keeper (pid $keeper) is not running"
  [[ -S $SOCK ]] || fail "$SOCK went away with serve $N"
}

start
nbdcopy "$WORK/src.img" "$(nbd_uri)" || fail "nbdcopy into the export failed"

# Readers over Unix and TCP until $WORK/readers.stop: each read is a new
# connection, 64 KiB at a random offset, compared with src.img. A stop
# closes the connections its daemon accepted (the handshake of one accepted
# just before may break off): the reader then reconnects. A refused
# connection or other data ends it with a message.
python3 - "$SOCK" "$PORT" "$WORK/src.img" "$WORK/readers.stop" >"$WORK/readers.out" 2>&1 <<'PY' &
import errno, os, random, sys, time
import nbd
sock, port, src, stop = sys.argv[1:]
data = open(src, "rb").read()
uris = ["nbd+unix:///?socket=" + sock, "nbd://127.0.0.1:%s/" % port]
reads, broken, longest = 0, 0, 0.0
while not os.path.exists(stop):
    for uri in uris:
        off = random.randrange(0, len(data) - 65536) & ~4095
        t0 = time.monotonic()
        try:
            h = nbd.NBD()
            h.connect_uri(uri)
            got = h.pread(65536, off)
            h.shutdown()
        except nbd.Error as e:
            if e.errnum in (errno.ECONNREFUSED, errno.ENOENT):
                sys.exit("%s: refused: %s" % (uri, e))
            broken += 1
            continue
        longest = max(longest, time.monotonic() - t0)
        if got != data[off:off + 65536]:
            sys.exit("%s: 64 KiB at %d differ" % (uri, off))
        reads += 1
print("%d reads, %d connections closed by a stop and made again, longest read %.0f ms" % (reads, broken, longest * 1000))
PY
READERS=$!
on_exit "kill $READERS 2>/dev/null"
sleep 1

for r in 1 2 3; do
  kill -0 $READERS 2>/dev/null || fail "the readers stopped before restart $r: $(cat "$WORK/readers.out")"
  if [[ $r -eq 2 ]]; then
    "$UBCACHE" stop --control "$CTL" 2>"$WORK/stop.err" || fail "ubcache stop: $(cat "$WORK/stop.err")"
  else
    kill -TERM $PID
  fi
  stopped
  # A client connecting now, with no daemon running, waits for the next one.
  timeout 60 nbdsh -u "$(nbd_uri)" -c 'import sys; sys.stdout.buffer.write(h.pread(1048576, 4194304))' \
    >"$WORK/gap.$r.out" 2>&1 &
  GAP=$!
  sleep 1
  kill -0 $GAP 2>/dev/null || fail "restart $r: a client connecting between stop and start ended: $(cat "$WORK/gap.$r.out")"
  start
  grep -q "unix:$SOCK: listening socket taken over" "$LOG" || fail "restart $r: the Unix socket was not taken over"
  grep -q "tcp:127.0.0.1:$PORT: listening socket taken over" "$LOG" || fail "restart $r: the TCP socket was not taken over"
  grep -q 'after a clean shutdown, checkpoint [0-9]*: 0 journal records replayed' "$LOG" ||
    fail "restart $r: the start replayed the journal"
  wait $GAP || fail "restart $r: the client that connected between stop and start failed: $(cat "$WORK/gap.$r.out")"
  cmp -n 1048576 "$WORK/gap.$r.out" <(tail -c +4194305 "$WORK/src.img") ||
    fail "restart $r: the client that connected between stop and start read other data"
  log "restart $r: listening sockets handed over; a client that connected while no daemon ran got the same data"
  sleep 1
done

touch "$WORK/readers.stop"
wait $READERS || fail "a reader failed: $(cat "$WORK/readers.out")"
log "readers across 3 restarts: $(cat "$WORK/readers.out") (shared machine)"
grep -q '^[1-9][0-9]* reads' "$WORK/readers.out" || fail "the readers read nothing"

# The final stop: nothing keeps the sockets.
"$UBCACHE" stop --delete --control "$CTL" 2>"$WORK/stop.err" || fail "ubcache stop --delete: $(cat "$WORK/stop.err")"
wait $PID || fail "serve exited $? after stop --delete"
! grep -q 'listening sockets stay open' "$LOG" || fail "stop --delete left a keeper"
! timeout 10 nbdinfo "$(nbd_uri)" >/dev/null 2>&1 || fail "a client still connects after stop --delete"
