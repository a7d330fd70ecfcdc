# SPDX-License-Identifier: Apache-2.0
# lib.sh — sourced by every tests/integration/NNN-*.sh script.
#
# Environment (set by ctest, see tests/CMakeLists.txt):
#   UBCACHE        path to the ubcache binary under test (required)
#   UBCACHE_SRC    source tree (default: two levels above this file)
#   UBCACHE_BUILD  build tree (informational)
#   UBCACHE_TEST_KEEP=1  keep $WORK, images included, even when the test passes
#
# Provides:
#   WORK                 per-test scratch directory under /var/tmp, removed on exit
#   SOCK                 default NBD Unix socket path ($WORK/nbd.sock)
#   start_server ARGS    `ubcache serve ARGS` in the background, stderr to
#                        $WORK/server.N.log; waits for the socket named by the
#                        first `--nbd unix:PATH`; fails if the process dies.
#   stop_server [SIG]    SIGTERM (or SIG), wait, assert exit status 0
#   server_alive         fail unless the server process still runs
#   fail MSG             print MSG and the server log tail, exit 1
#   on_exit CMD          run CMD (eval'd) at exit, most recent first
#   nbd_uri [EXPORT]     nbd+unix URI for $SOCK
#   ctl ARGS             `ubcache ctl --control $CTL_SOCK ARGS`
#   on_hang              if a script defines it: called with a message, the
#                        server still running, when start_server or
#                        stop_server gives up waiting on it (crash_lib.sh
#                        dumps the daemon's stacks there)
set -euo pipefail

# Debian's tools first: nbdsh needs the python3 that has python3-libnbd, not
# a python3 some version manager put earlier in PATH.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
TEST_NAME=$(basename "$0" .sh)
: "${UBCACHE:?UBCACHE must name the ubcache binary (ctest sets it)}"
UBCACHE_SRC=${UBCACHE_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
INTEGRATION_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -x $UBCACHE ]] || { echo "FAIL: $TEST_NAME: UBCACHE=$UBCACHE is not executable" >&2; exit 1; }

# Not /tmp: it may be a tmpfs, which has no O_DIRECT.
WORK=$(mktemp -d "/var/tmp/ubcache-it.$TEST_NAME.XXXXXX")
SOCK=$WORK/nbd.sock
SERVER_PID=""
SERVER_LOG=""
SERVER_SOCK=""
SERVER_COUNT=0
START_TIMEOUT=${UBCACHE_TEST_START_TIMEOUT:-20}
STOP_TIMEOUT=${UBCACHE_TEST_STOP_TIMEOUT:-10}
_EXIT_HOOKS=()

log() { echo "[$TEST_NAME] $*" >&2; }

server_log_tail() {
  if [[ -n $SERVER_LOG && -f $SERVER_LOG ]]; then
    echo "---- server log tail ($SERVER_LOG) ----" >&2
    tail -n 40 "$SERVER_LOG" >&2 || true
    echo "---- end of server log ----" >&2
  fi
}

fail() {
  echo "FAIL: $TEST_NAME: $*" >&2
  server_log_tail
  exit 1
}

on_exit() { _EXIT_HOOKS+=("$1"); }

_cleanup() {
  local rc=$?
  set +e
  local i
  for ((i = ${#_EXIT_HOOKS[@]} - 1; i >= 0; i--)); do
    eval "${_EXIT_HOOKS[$i]}" >/dev/null 2>&1
  done
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  if [[ -n ${UBCACHE_TEST_KEEP:-} ]]; then
    [[ $rc -eq 0 ]] && echo "PASS: $TEST_NAME" >&2
    echo "($TEST_NAME: UBCACHE_TEST_KEEP: everything kept in $WORK)" >&2
  elif [[ $rc -eq 0 ]]; then
    rm -rf "$WORK"
    echo "PASS: $TEST_NAME" >&2
  else
    # Keep the scratch dir of a failed test, but not its large images.
    find "$WORK" -type f -size +1M -delete 2>/dev/null
    echo "($TEST_NAME: logs kept in $WORK)" >&2
  fi
  exit $rc
}
trap _cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server ARGS... — runs `$UBCACHE serve ARGS...`.
start_server() {
  [[ -z $SERVER_PID ]] || fail "start_server: a server (pid $SERVER_PID) is already running"
  SERVER_SOCK=""
  local prev="" a
  for a in "$@"; do
    if [[ $prev == --nbd && $a == unix:* && -z $SERVER_SOCK ]]; then SERVER_SOCK=${a#unix:}; fi
    prev=$a
  done
  [[ -n $SERVER_SOCK ]] || fail "start_server: no --nbd unix:PATH in: $*"
  rm -f "$SERVER_SOCK"
  SERVER_COUNT=$((SERVER_COUNT + 1))
  SERVER_LOG=$WORK/server.$SERVER_COUNT.log
  log "starting: ubcache serve $*"
  "$UBCACHE" serve "$@" 2>"$SERVER_LOG" &
  SERVER_PID=$!
  local deadline=$((SECONDS + START_TIMEOUT))
  while [[ ! -S $SERVER_SOCK ]]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      local rc=0
      wait "$SERVER_PID" || rc=$?
      SERVER_PID=""
      fail "server exited with status $rc before creating $SERVER_SOCK (args: $*)"
    fi
    if ((SECONDS >= deadline)); then
      _hang "server did not create $SERVER_SOCK within ${START_TIMEOUT}s"
      fail "server did not create $SERVER_SOCK within ${START_TIMEOUT}s"
    fi
    sleep 0.05
  done
}

_hang() { if declare -F on_hang >/dev/null; then on_hang "$1"; fi; }

server_alive() {
  [[ -n $SERVER_PID ]] || fail "server_alive: no server started"
  kill -0 "$SERVER_PID" 2>/dev/null || {
    local rc=0
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=""
    fail "server died (exit status $rc) ${1:+while: $1}"
  }
}

# stop_server [SIGNAL] — default TERM; asserts exit status 0 within STOP_TIMEOUT.
stop_server() {
  local sig=${1:-TERM}
  [[ -n $SERVER_PID ]] || fail "stop_server: no server running"
  server_alive "before SIG$sig"
  kill -"$sig" "$SERVER_PID"
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$SERVER_PID" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      _hang "server did not exit within ${STOP_TIMEOUT}s of SIG$sig"
      kill -KILL "$SERVER_PID" 2>/dev/null || true
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      fail "server did not exit within ${STOP_TIMEOUT}s of SIG$sig"
    fi
    sleep 0.05
  done
  local rc=0
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=""
  [[ $rc -eq 0 ]] || fail "server exited with status $rc after SIG$sig (expected 0)"
  log "server stopped cleanly after SIG$sig"
}

nbd_uri() { echo "nbd+unix:///${1:-}?socket=${SERVER_SOCK:-$SOCK}"; }

# The control socket tests pass to `serve --control`.
CTL_SOCK=$WORK/ctl.sock
ctl() { "$UBCACHE" ctl --control "$CTL_SOCK" "$@"; }

# expect_contains TEXT NEEDLE WHAT — fixed-string match.
expect_contains() {
  grep -qF -- "$2" <<<"$1" || fail "$3: expected to find '$2' in:
$1"
}

# format_cache_backing CACHE_SIZE BACKING_SIZE — new files CACHE=$WORK/cache.img
# and BACKING=$WORK/backing.img of those sizes, formatted by one `ubcache
# format` (so the backing device is attached to the cache set).
format_cache_backing() {
  CACHE=$WORK/cache.img BACKING=$WORK/backing.img
  truncate -s "$1" "$CACHE"
  truncate -s "$2" "$BACKING"
  "$UBCACHE" format --cache "$CACHE" --backing "$BACKING" >"$WORK/format.log" 2>&1 ||
    fail "format --cache $CACHE --backing $BACKING failed: $(cat "$WORK/format.log")"
}

# random_file PATH MIB — fill PATH with MIB MiB of random data.
random_file() {
  dd if=/dev/urandom of="$1" bs=1M count="$2" status=none
}

# free_tcp_port — an unused TCP port on 127.0.0.1.
free_tcp_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# stats — the statistics line of the last server log as variables hits,
# misses, bhits, bmisses, colls, bypassed (bytes).
stats() {
  local line
  line=$(grep -E "export 'ubcache': cache_hits" "$SERVER_LOG" | tail -n 1) ||
    fail "no statistics line in $SERVER_LOG"
  log "stats: ${line#*export }"
  eval "$(python3 - "$line" <<'EOF'
import re, sys
m = re.search(r"cache_hits (\d+) cache_misses (\d+) cache_hit_ratio (\d+)% cache_bypass_hits (\d+) "
              r"cache_bypass_misses (\d+) cache_miss_collisions (\d+) bypassed ([\d.]+) (B|KiB|MiB|GiB|TiB)\b",
              sys.argv[1])
if not m:
    sys.exit(1)
units = {"B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}
g = m.groups()
print(f"hits={g[0]} misses={g[1]} bhits={g[3]} bmisses={g[4]} colls={g[5]} "
      f"bypassed={int(float(g[6]) * (1 << units[g[7]]))}")
EOF
  )" || fail "cannot parse the statistics line: $line"
}

# soft_fail MSG — record a failed check and go on (the other checks still
# tell something); the test fails at the end with all of them.
SOFT_FAILS=()
soft_fail() { SOFT_FAILS+=("$*"); echo "CHECK FAILED: $TEST_NAME: $*" >&2; }
soft_fail_report() {
  ((${#SOFT_FAILS[@]} == 0)) || fail "$(printf '%s\n' "${SOFT_FAILS[@]}")"
}

# ---- a filesystem on the export: nbdfuse + losetup (050, 094) ----
# nbdfuse_setup — FUSE_DIR and MNT under $WORK; detach on exit. Then
# `attach SIZE` exposes $SERVER_SOCK as $LOOP, `detach` undoes it, and
# `verify_files LABEL` checks $MNT/data against $WORK/sums.
nbdfuse_setup() {
  FUSE_DIR=$WORK/fuse
  MNT=$WORK/mnt
  mkdir -p "$FUSE_DIR" "$MNT"
  LOOP=""
  FUSE_PID=""
  on_exit detach
}

# attach SIZE [direct] — the export as a file (nbdfuse) and a loop device
# over it. `direct`: the loop device does direct I/O in 4 KiB sectors (an
# export over a formatted cache takes no smaller request, and no page cache
# of nbdfuse's file sits between the filesystem's flushes and the export:
# as bench/suites/common.sh), and nbdfuse is
# not reported when it dies — nbdfuse 1.14 aborts on an assertion
# (operations.c: in_flight >= 1) when the server goes away with requests in
# flight, as tests that kill the daemon under a filesystem do; `detach`
# still ends it.
attach() {
  rm -f "$WORK/nbdfuse.pid"
  nbdfuse -P "$WORK/nbdfuse.pid" "$FUSE_DIR/disk" --unix "$SERVER_SOCK" 2>"$WORK/nbdfuse.log" &
  FUSE_PID=$!
  [[ ${2:-} == direct ]] && disown "$FUSE_PID"
  local deadline=$((SECONDS + 20))
  until [[ -s $WORK/nbdfuse.pid && -f $FUSE_DIR/disk ]]; do
    kill -0 "$FUSE_PID" 2>/dev/null || fail "nbdfuse exited: $(cat "$WORK/nbdfuse.log")"
    ((SECONDS < deadline)) || fail "nbdfuse did not become ready in 20s: $(cat "$WORK/nbdfuse.log")"
    sleep 0.1
  done
  local size
  size=$(stat -c %s "$FUSE_DIR/disk")
  [[ $size == "$1" ]] || fail "nbdfuse file is $size bytes, expected $1"
  if [[ ${2:-} == direct ]]; then
    LOOP=$(losetup -f --show --direct-io=on --sector-size 4096 "$FUSE_DIR/disk") || fail "losetup on the nbdfuse file failed"
    [[ $(cat "/sys/block/${LOOP#/dev/}/loop/dio") == 1 ]] || fail "$LOOP does not do direct I/O"
  else
    LOOP=$(losetup -f --show "$FUSE_DIR/disk") || fail "losetup on the nbdfuse file failed"
  fi
  log "attached $LOOP"
}

detach() {
  # timeout: a hung server must not hang the cleanup of a failed run.
  if mountpoint -q "$MNT"; then timeout 30 umount "$MNT" || umount -l "$MNT"; fi
  if [[ -n $LOOP ]]; then losetup -d "$LOOP" || true; LOOP=""; fi
  if [[ -n $FUSE_PID ]]; then
    timeout 30 fusermount3 -u "$FUSE_DIR" 2>/dev/null || fusermount3 -uz "$FUSE_DIR" 2>/dev/null || true
    local i
    for i in $(seq 100); do kill -0 "$FUSE_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$FUSE_PID" 2>/dev/null || true
    wait "$FUSE_PID" 2>/dev/null || true
    FUSE_PID=""
  fi
}
verify_files() {
  (cd "$MNT/data" && sha256sum --quiet -c "$WORK/sums") ||
    fail "$1: file checksums differ"
}

# ---- clients used by several tests ----
# qio LABEL CMD... — one qemu-io connection running each CMD; must exit 0
# with no "failed"/"error" in its output.
qio() {
  local label=$1; shift
  local args=() c out rc=0
  for c in "$@"; do args+=(-c "$c"); done
  out=$(timeout 120 qemu-io -f raw "$(nbd_uri)" "${args[@]}" 2>&1) || rc=$?
  if [[ $rc -ne 0 ]] || grep -qiE 'failed|error|Pattern verification' <<<"$out"; then
    fail "$label: qemu-io exit $rc, commands: $* ; output:
$out"
  fi
}

# qio_must_fail LABEL CMD... — proves the checker can see a mismatch.
qio_must_fail() {
  local label=$1; shift
  local args=() c out rc=0
  for c in "$@"; do args+=(-c "$c"); done
  out=$(timeout 120 qemu-io -f raw "$(nbd_uri)" "${args[@]}" 2>&1) || rc=$?
  [[ $rc -ne 0 ]] && grep -q 'Pattern verification failed' <<<"$out" ||
    fail "$label: expected a pattern mismatch (exit 1), got exit $rc:
$out"
}

# run_fio LABEL ARGS... — fio must exit 0 and every job report error 0 and
# move bytes; its JSON output is kept in $WORK. FIO_TIMEOUT (default 400 s)
# bounds the whole fio run.
run_fio() {
  local label=$1; shift
  local json=$WORK/fio.${label//[^a-z0-9]/_}.json rc=0
  # In $WORK, without state files: fio would drop *-verify.state into the cwd.
  (cd "$WORK" && timeout "${FIO_TIMEOUT:-400}" fio --output-format=json --output="$json" --ioengine=nbd --uri="$(nbd_uri)" \
    --verify_state_save=0 --group_reporting=0 "$@") 2>"$WORK/fio.stderr" || rc=$?
  [[ $rc -eq 0 ]] || fail "$label: fio exited $rc: $(tail -n 20 "$WORK/fio.stderr"; grep -m5 -i 'err\|verify' "$json" || true)"
  python3 - "$json" "$label" <<'EOF' || fail "$label: fio reported errors (above)"
import json, sys
text = open(sys.argv[1]).read()
# fio may print notes before the JSON document.
doc = json.loads(text[text.index("{"):])
bad = False
for job in doc["jobs"]:
    moved = job["read"]["io_bytes"] + job["write"]["io_bytes"]
    if job["error"] != 0 or moved == 0:
        print(f"  job {job['jobname']}: err={job['error']} read={job['read']['io_bytes']} "
              f"write={job['write']['io_bytes']}", file=sys.stderr)
        bad = True
ops = {d: sum(j[d]["total_ios"] for j in doc["jobs"]) for d in ("read", "write")}
mib = {d: sum(j[d]["io_bytes"] for j in doc["jobs"]) >> 20 for d in ("read", "write")}
errs = sum(j["error"] for j in doc["jobs"])
print(f"  {sys.argv[2]}: {len(doc['jobs'])} jobs, {ops['read']} reads ({mib['read']} MiB), "
      f"{ops['write']} writes ({mib['write']} MiB), {errs} errors", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
  grep -qi 'verify.*fail\|bad magic\|crc32c.*mismatch\|bad header' "$WORK/fio.stderr" &&
    fail "$label: fio reported a verify failure: $(grep -i -m5 'verify\|magic\|crc\|header' "$WORK/fio.stderr")"
  server_alive "$label"
}

# X.509 credentials for TLS tests (certtool, as nbdkit's and qemu's docs make them).
# make_tls_ca DIR — a self-signed CA: DIR/ca-key.pem, DIR/ca-cert.pem.
make_tls_ca() {
  mkdir -p "$1"
  certtool --generate-privkey --outfile "$1/ca-key.pem" 2>/dev/null
  printf 'cn = "ubcache test CA %s"\nca\ncert_signing_key\nexpiration_days = 2\n' "$1" >"$1/ca.info"
  certtool --generate-self-signed --load-privkey "$1/ca-key.pem" --template "$1/ca.info" \
    --outfile "$1/ca-cert.pem" 2>/dev/null || fail "certtool: cannot make a CA in $1"
}
# make_tls_cert CA_DIR OUT_DIR ROLE — ROLE-key.pem/ROLE-cert.pem (server or
# client) signed by CA_DIR, and a copy of the CA certificate in OUT_DIR.
make_tls_cert() {
  local ca=$1 out=$2 role=$3
  mkdir -p "$out"
  certtool --generate-privkey --outfile "$out/$role-key.pem" 2>/dev/null
  if [[ $role == server ]]; then
    printf 'cn = "localhost"\ndns_name = "localhost"\nip_address = "127.0.0.1"\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' \
      >"$out/$role.info"
  else
    printf 'cn = "ubcache test client"\ntls_www_client\nencryption_key\nsigning_key\nexpiration_days = 2\n' \
      >"$out/$role.info"
  fi
  certtool --generate-certificate --load-privkey "$out/$role-key.pem" \
    --load-ca-certificate "$ca/ca-cert.pem" --load-ca-privkey "$ca/ca-key.pem" \
    --template "$out/$role.info" --outfile "$out/$role-cert.pem" 2>/dev/null ||
    fail "certtool: cannot make a $role certificate"
  cp "$ca/ca-cert.pem" "$out/ca-cert.pem"
}

# ---- a grown export (171-resize-file, 172-resize-rbd) ----
# The script defines `serve` (start_server on its devices, writeback mode,
# writeback_running=0 so what it writes stays dirty in the cache).
# nbd_size — the size a new NBD connection is given (nbdinfo).
nbd_size() { nbdinfo --size "$(nbd_uri)"; }
# nbd_put FILE OFFSET — FILE written at OFFSET through NBD, then a FLUSH.
nbd_put() {
  nbdsh -u "$(nbd_uri)" -c "h.pwrite(open('$1', 'rb').read(), $2); h.flush()" ||
    fail "nbdsh: writing $1 at $2 failed"
}
# nbd_holds FILE OFFSET WHAT — fails unless the export holds FILE at OFFSET.
nbd_holds() {
  nbdsh -u "$(nbd_uri)" -c "
import sys
want = open('$1', 'rb').read()
sys.exit(0 if h.pread(len(want), $2) == want else 1)" || fail "$3: the export at $2 does not hold $1"
}
# grown_write OLD NEW OFFSET — after the export grew: NEW (a file) written at
# OFFSET, past the old end, reads back, and so does OLD at 0; NEW is dirty
# in the cache (writeback paused).
grown_write() {
  nbd_put "$2" "$3"
  nbd_holds "$2" "$3" "past the old end"
  nbd_holds "$1" 0 "before the old end"
  local dirty
  dirty=$(ctl dirty-data)
  ((dirty >= $(stat -c %s "$2"))) || fail "writeback paused, yet only $dirty bytes are dirty"
}
# grown_restart_flush SIZE OLD NEW OFFSET — a restart (`serve`) keeps the
# grown SIZE and both files (read from the cache: still dirty); then
# writeback runs and `ctl flush` writes them back (no dirty data left). The
# script checks the backing storage itself.
grown_restart_flush() {
  stop_server
  serve
  [[ $(nbd_size) == "$1" ]] || fail "after a restart: nbdinfo size $(nbd_size), want $1"
  nbd_holds "$3" "$4" "after a restart, past the old end"
  nbd_holds "$2" 0 "after a restart, before the old end"
  ctl set writeback_running 1 >/dev/null
  ctl flush >"$WORK/flush.out" 2>&1 || fail "ctl flush: $(cat "$WORK/flush.out")"
  [[ $(ctl dirty-data) == 0 ]] || fail "dirty data left after ctl flush: $(ctl dirty-data)"
}
