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
# Then the same restart under a stand-in service manager that speaks
# systemd's protocol (sd_notify FDSTORE=1 in, LISTEN_FDS/LISTEN_PID out): the
# daemon stores its sockets there, leaves no keeper, and the next start
# takes them from LISTEN_FDS while a client waits.
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
SIZE=$(nbdinfo --size "$(nbd_uri)") || fail "nbdinfo --size failed"

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

# ---- under a service manager: the file descriptor store ----
EXPORT_SIZE=$SIZE python3 - "$UBCACHE" "$WORK" "$SOCK" "${ARGS[@]}" >"$WORK/manager.out" 2>&1 <<'PY' || fail "fd store: $(cat "$WORK/manager.out")"
import array, os, signal, socket, subprocess, sys, time
ubcache, work, sock, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(work + "/manager.notify")
stored = []

def start(n, fds):
    """serve under the manager: NOTIFY_SOCKET, and fds as LISTEN_FDS from 3."""
    log = open("%s/managed.%d.log" % (work, n), "w")
    pid = os.fork()
    if pid == 0:
        for i, fd in enumerate(fds):
            os.dup2(fd, 100 + i)
        for i in range(len(fds)):
            os.dup2(100 + i, 3 + i)
            os.set_inheritable(3 + i, True)
        os.dup2(log.fileno(), 2)
        env = dict(os.environ, NOTIFY_SOCKET=work + "/manager.notify")
        if fds:
            env.update(LISTEN_FDS=str(len(fds)), LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES=":".join(["nbd"] * len(fds)))
        os.execve(ubcache, [ubcache, "serve"] + args, env)
    return pid

def wait_ready(pid):
    """Notifications until READY=1; FDSTORE=1 ones are kept (their fds)."""
    notify.settimeout(60)
    while True:
        msg, anc, _, _ = notify.recvmsg(4096, socket.CMSG_SPACE(64 * 4))
        fds = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i"); a.frombytes(data[: len(data) - len(data) % 4]); fds += list(a)
        if b"FDSTORE=1" in msg:
            stored.extend(fds)
        else:
            for fd in fds: os.close(fd)
        if b"READY=1" in msg:
            return

pid = start(1, [])
import atexit
atexit.register(lambda: os.kill(pid, signal.SIGKILL) if os.path.exists("/proc/%d" % pid) else None)  # a failure leaves nothing
wait_ready(pid)
if len(stored) != 2:
    sys.exit("FDSTORE=1 brought %d sockets, not 2" % len(stored))
os.kill(pid, signal.SIGTERM)
if os.waitpid(pid, 0)[1] != 0:
    sys.exit("serve 1 did not exit 0")
log1 = open(work + "/managed.1.log").read()
if "listening sockets stay open in process" in log1:
    sys.exit("serve 1 left a keeper under a service manager")
# A client now, with only the store holding the sockets: it must wait.
client = subprocess.Popen(["nbdinfo", "--size", "nbd+unix:///?socket=" + sock], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
time.sleep(1)
if client.poll() is not None:
    sys.exit("a client between stop and start ended: %s" % client.stdout.read().decode())
pid = start(2, stored)
wait_ready(pid)
out = client.communicate(timeout=60)[0].decode().strip()
if client.returncode != 0 or out != os.environ["EXPORT_SIZE"]:
    sys.exit("the waiting client got %r (exit %d)" % (out, client.returncode))
log2 = open(work + "/managed.2.log").read()
for what in ("2 sockets from the service manager", "unix:%s: listening socket taken over" % sock):
    if what not in log2:
        sys.exit("serve 2's log lacks %r" % what)
subprocess.run([ubcache, "stop", "--delete", "--control", work + "/ctl.sock"], check=True, stderr=subprocess.DEVNULL)
os.waitpid(pid, 0)
print("fd store: 2 sockets stored, passed as LISTEN_FDS, a waiting client served")
PY
log "$(cat "$WORK/manager.out")"
