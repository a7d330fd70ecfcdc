# SPDX-License-Identifier: Apache-2.0
# crash_lib.sh — the crash harness behind 120-writeback-crash.sh (kill -9)
# and 121-writeback-powercut.sh (kill -9 = a power cut of both devices).
# One harness, two entry points: each sets CRASH_POWERCUT (0/1) and
# CRASH_DEFAULT_CYCLES, sources this file and calls crash_main.
#
# What a run does:
#  0. proves the checker can fail: crash_writer.py selftest (doctored logs
#     and images), and one cycle against nbdkit's file plugin (a server
#     nobody here wrote) that must verify, then must not once a durable
#     block is zeroed and another torn;
#  1. formats a cache file and a backing file (one `ubcache format`, so the
#     backing device is in the cache set), serves them in writeback over a
#     SAS model (`sas:`), prefills the region and flushes;
#  2. per cycle: the writer (crash_writer.py write: random 4..64 KiB writes,
#     some FUA, a FLUSH every ~32 writes, read-backs, 16 in flight; every
#     issue and reply logged) runs; the daemon is killed with SIGKILL at a
#     random moment of one of these kinds:
#       sleep       0.2..3 s after the writer started
#       writeback   the same, with writeback at full speed (writeback_delay
#                   0, writeback_percent 0, writeback_rate 64M) if it exists
#       flush       a few ms into `ctl flush` (writing back all dirty data)
#       gc          a few ms into `ctl trigger-gc`
#       commit      at the predicted moment of the next journal commit
#                   (crash_writer.py kill-on: internal/journal_bytes grows)
#       checkpoint  at the predicted next checkpoint (journal_bytes drops;
#                   without one in 2 s, at the timeout)
#     then the writer sees the connection die and exits; the daemon is
#     started again on the same devices; the warm check (below) reads; the
#     verifier reads the whole region and checks it against the one log of
#     all cycles (crash_writer.py's header states the rule); the restarted
#     daemon serves the next cycle;
#  3. at the end, the control: a writer run that ends with a FLUSH, a clean
#     SIGTERM, a restart that must be warm and pass the warm check (so the
#     check can pass), a last verify.
#
# Watchdog: every step that waits on the daemon (prefill, warm check, verify,
# ctl, kill-on, the last writer run) runs under crash_guard: once a second the
# daemon must answer a `ctl show` within CRASH_WATCHDOG_CTL_S and its answered
# requests or written-back bytes must have moved; CRASH_WATCHDOG_S seconds in
# a row without both, the watchdog writes every thread's stack of the daemon
# (gdb `thread apply all bt`, with each thread's state and wait channel) into
# the test log and fails. A start or a SIGTERM that does not finish in time
# dumps them too (lib.sh's on_hang). So a hang is reported with its cause,
# not as ctest's timeout. 129-crash-watchdog.sh proves it fires
# (CRASH_WATCHDOG_SELFCHECK: the daemon is SIGSTOPped under a guarded ctl).
#
# Warm check: before the verify (whose whole-region read would fill any
# cache), up to CRASH_WARM_BLOCKS blocks whose last write before the kill was durable
# are read with 4 KiB reads; stats_total/cache_hits must grow by at least
# CRASH_WARM_MIN_PCT percent of them: a cache that recovers its journal
# has every one of them. CRASH_REQUIRE_WARM=0 reports it without failing.
#
# Environment (defaults in brackets):
#   CRASH_CYCLES        cycles [CRASH_DEFAULT_CYCLES of the entry script]
#   CRASH_SEED          seeds kill times, modes and the writer [random, printed]
#   CRASH_KEEP=1        keep the work dir (images, log, state, server logs)
#   CRASH_REQUIRE_WARM  1: a cold restart fails the test [1]
#   CRASH_WARM_MIN_PCT  hits, percent of the warm reads [50]
#   CRASH_WARM_BLOCKS   blocks the warm check reads at most [64]
#   CRASH_REGION_MIB    region the writer covers, MiB [32]
#   CRASH_CACHE_SIZE / CRASH_BACKING_SIZE   image sizes [256M / 384M]
#   CRASH_KILL_MS       "MIN MAX" of the random kill delay, ms ["200 3000"]
#   CRASH_MODES         kill kinds to draw from ["sleep sleep writeback flush gc commit checkpoint"]
#   CRASH_RATE          writer requests/s at most [1000] (keeps its CPU modest)
#   CRASH_ACKED_DURABLE 1: every acknowledged write must read back, flushed or
#                       not — the rule for a kill -9 with the devices intact
#                       (crash_writer.py --acked-durable); 0: only writes
#                       acknowledged before a completed FLUSH, or FUA
#                       [1 for 120 (kill -9), 0 for 121 (power cuts)]
#   CRASH_KNOBS         NAME=VALUE pairs set in every cycle where the daemon has
#                       them (a `serve --NAME` flag, or a writable `ctl` attribute);
#                       others are skipped and named once ["journal_delay_ms=5"]
#   CRASH_FAULT         121 only: the fault option of both devices (without
#                       seed=: CRASH_SEED gives it) [tear_unflushed=1];
#                       drop_unflushed=1 also works
#   CRASH_SECTOR        the devices' atomic unit: below 4096 the verifier lets a
#                       block mix, sector by sector, writes it may hold
#                       [512 with drop_unflushed, else 4096]
#   CRASH_SELFTEST=0    skip step 0
#   CRASH_WATCHDOG_S    seconds without the daemon answering or progressing
#                       before the watchdog dumps its stacks and fails [60]
#   CRASH_WATCHDOG_CTL_S  how long one ctl probe may take [10]
#   CRASH_WATCHDOG_SELFCHECK=1  instead of the cycles: SIGSTOP the daemon under
#                       a guarded ctl; the watchdog must fire with its stacks
#   CRASH_BACKING       sas: a backing file behind the SAS model [sas];
#                       rbd: an RBD image on a one-node Ceph cluster that the
#                       run starts (tests/ceph/cluster.sh, a 5 s watch
#                       timeout so a killed daemon's lock frees quickly; the
#                       restarted daemon waits for it), 120's rule and kill
#                       modes; 152-rbd-crash.sh
if [[ ${CRASH_KEEP:-0} == 1 ]]; then export UBCACHE_TEST_KEEP=1; fi
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CRASH_CYCLES=${CRASH_CYCLES:-$CRASH_DEFAULT_CYCLES}
CRASH_SEED=${CRASH_SEED:-$((($(date +%s%N) / 1000) % 1000000))}
CRASH_REQUIRE_WARM=${CRASH_REQUIRE_WARM:-1}
CRASH_WARM_MIN_PCT=${CRASH_WARM_MIN_PCT:-50}
CRASH_WARM_BLOCKS=${CRASH_WARM_BLOCKS:-64}
CRASH_REGION_MIB=${CRASH_REGION_MIB:-32}
CRASH_CACHE_SIZE=${CRASH_CACHE_SIZE:-256M}
CRASH_BACKING_SIZE=${CRASH_BACKING_SIZE:-384M}
CRASH_KILL_MS=${CRASH_KILL_MS:-200 3000}
CRASH_MODES=${CRASH_MODES:-sleep sleep writeback flush gc commit checkpoint}
CRASH_RATE=${CRASH_RATE:-1000}
CRASH_KNOBS=${CRASH_KNOBS:-journal_delay_ms=5}
CRASH_ACKED_DURABLE=${CRASH_ACKED_DURABLE:-$((CRASH_POWERCUT ? 0 : 1))}
CRASH_FAULT=${CRASH_FAULT:-tear_unflushed=1}
CRASH_SELFTEST=${CRASH_SELFTEST:-1}
CRASH_WATCHDOG_S=${CRASH_WATCHDOG_S:-60}
CRASH_WATCHDOG_CTL_S=${CRASH_WATCHDOG_CTL_S:-10}
CRASH_WATCHDOG_SELFCHECK=${CRASH_WATCHDOG_SELFCHECK:-0}
# drop_unflushed keeps and flushes a device's logical blocks (512 bytes on
# most files) one by one: a cut in the middle of its flush tears a 4 KiB
# block at 512 bytes. tear_unflushed decides per 4 KiB sector.
if ((CRASH_POWERCUT)) && [[ $CRASH_FAULT == *drop_unflushed* ]]; then
  CRASH_SECTOR=${CRASH_SECTOR:-512}
else
  CRASH_SECTOR=${CRASH_SECTOR:-4096}
fi
WRITER=$INTEGRATION_DIR/crash_writer.py
BLOCKS=$((CRASH_REGION_MIB * 256))
CLOG=$WORK/crash.log
CSTATE=$WORK/crash.state
RANDOM=$CRASH_SEED
read -r KILL_MIN KILL_MAX <<<"$CRASH_KILL_MS"
read -ra MODES <<<"$CRASH_MODES"

cw() { python3 "$WRITER" "$@"; }
# Children of a failed run: ended at exit by their id, once they are ours.
REF_PID="" WRITER_PID=""
on_exit '[[ -z $REF_PID ]] || kill -KILL "$REF_PID"'
on_exit '[[ -z $WRITER_PID ]] || kill -KILL "$WRITER_PID"'
# rand MIN MAX — an integer in [MIN, MAX], from bash's seeded RANDOM.
rand() { echo $(($1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1))); }
ms_to_s() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

# ---- the watchdog ----
STACK_DUMPS=0
# The harness's own stderr: the watchdog reports there even from a step
# whose stderr goes to a file.
exec {CRASH_ERR}>&2
# crash_stacks WHY — every thread of the running daemon: state and wait
# channel from /proc, then its stack from gdb; into $WORK/stacks.N.txt and
# the test log.
crash_stacks() {
  local pid=$SERVER_PID out t
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || { log "watchdog: $1 (no daemon running to dump)"; return 0; }
  STACK_DUMPS=$((STACK_DUMPS + 1))
  out=$WORK/stacks.$STACK_DUMPS.txt
  {
    echo "==== watchdog: $1 — daemon pid $pid, every thread ===="
    for t in /proc/"$pid"/task/*; do
      echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null): state $(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f1)," \
        "waiting in $(cat "$t/wchan" 2>/dev/null || echo '?')"
    done
    timeout 120 gdb -p "$pid" -batch -nx -ex 'set pagination off' -ex 'thread apply all bt' 2>&1 |
      grep -vE '^\[(New LWP|Thread debugging|Inferior)|^Using host libthread_db' || echo "(gdb failed)"
    echo "==== end of the daemon's stacks ===="
    # What the daemon says of itself (free buckets, dirty data, writeback):
    # a hang's state, not only where its threads sleep.
    echo "==== ctl show ===="
    timeout "$CRASH_WATCHDOG_CTL_S" "$UBCACHE" ctl --control "$CTL_SOCK" show 2>&1 || echo "(ctl show failed)"
    echo "==== end of ctl show ===="
  } >"$out" 2>&1
  cat "$out" >&"$CRASH_ERR"
}
on_hang() { crash_stacks "$1"; }

# crash_progress — the daemon's answered requests and written-back bytes, or
# nothing (status 1) when it does not answer within CRASH_WATCHDOG_CTL_S.
crash_progress() {
  local out
  out=$(timeout "$CRASH_WATCHDOG_CTL_S" "$UBCACHE" ctl --control "$CTL_SOCK" show 2>/dev/null) || return 1
  grep -E '(requests/|writeback_written)' <<<"$out" | tr -s ' \n' ' '
}

# crash_guard WHAT CMD... — runs CMD, which waits on the daemon, under the
# watchdog (see the header); returns CMD's status.
crash_guard() {
  local what=$1
  shift
  "$@" &
  local pid=$! last="" cur since=$SECONDS next=$((SECONDS + 1)) rc=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.02
    ((SECONDS >= next)) || continue
    cur=$(crash_progress) || cur=""
    kill -0 "$pid" 2>/dev/null || break
    if [[ -n $cur && $cur != "$last" ]]; then
      since=$SECONDS
      last=$cur
    elif ((SECONDS - since >= CRASH_WATCHDOG_S)); then
      local why="the daemon ${cur:+answered ctl but }made no progress${cur:- and did not answer ctl within ${CRASH_WATCHDOG_CTL_S} s} for $((SECONDS - since)) s during: $what"
      crash_stacks "$why"
      # CMD runs in a subshell when it is a function (ctl, cw): its child too.
      kill -KILL $(pgrep -P "$pid") "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      fail "watchdog: $why (stacks above and in $WORK/stacks.$STACK_DUMPS.txt)" 2>&"$CRASH_ERR"
    fi
    next=$((SECONDS + 1))
  done
  wait "$pid" || rc=$?
  return $rc
}
gctl() { crash_guard "ctl $*" ctl "$@"; }
gcw() { crash_guard "crash_writer.py $1" cw "$@"; }

# crash_watchdog_selfcheck — the watchdog must fire on a daemon that stops:
# SIGSTOP, a guarded ctl, and the dump must hold the daemon's threads.
crash_watchdog_selfcheck() {
  local out=$WORK/watchdog-selfcheck.log rc=0
  kill -STOP "$SERVER_PID"
  (CRASH_ERR=2 CRASH_WATCHDOG_S=3 CRASH_WATCHDOG_CTL_S=2 crash_guard "selfcheck: ctl get requests/read of a SIGSTOPped daemon" \
    ctl get requests/read) >"$out" 2>&1 || rc=$?
  kill -CONT "$SERVER_PID"
  cat "$out" >&2
  ((rc != 0)) || fail "watchdog selfcheck: a guarded ctl of a stopped daemon succeeded: $(cat "$out")"
  grep -q "FAIL: .*watchdog: the daemon made no progress and did not answer ctl" "$out" &&
    grep -qE "^thread [0-9]+ ub-journal: state T" "$out" &&
    grep -qE "^Thread [0-9]+ .*\(LWP [0-9]+\)" "$out" &&
    grep -qE "^#[0-9]+ .* in ubcache::" "$out" ||
    fail "watchdog selfcheck: no failure with the daemon's stacks (journal thread stopped, gdb frames in ubcache::): $(head -c 4000 "$out")"
  log "watchdog selfcheck: fired on the SIGSTOPped daemon after $(grep -oE 'for [0-9]+ s' "$out" | head -n 1 | tr -dc 0-9) s;" \
    "$(grep -cE '^Thread [0-9]+ ' "$out") thread stacks dumped"
}

# ---- step 0: the checker can fail ----
crash_selftest() {
  cw selftest >"$WORK/selftest.log" 2>&1 || fail "crash_writer.py selftest: $(cat "$WORK/selftest.log")"
  log "selftest: $(tail -n 1 "$WORK/selftest.log")"
  # One cycle against nbdkit's file plugin: its writes are in the page cache
  # the moment they are acknowledged, so after kill -9 everything verifies.
  local ref=$WORK/ref.img rsock=$WORK/ref.sock rlog=$WORK/ref.log rstate=$WORK/ref.state n=2048
  local uri="nbd+unix:///?socket=$rsock"
  truncate -s $((n * 4096)) "$ref"
  _crash_ref_start() {
    rm -f "$rsock"
    nbdkit -f -U "$rsock" file "$ref" 2>>"$WORK/nbdkit.log" &
    REF_PID=$!
    local deadline=$((SECONDS + 10))
    until [[ -S $rsock ]]; do
      ((SECONDS < deadline)) || fail "selftest: nbdkit did not start: $(cat "$WORK/nbdkit.log")"
      sleep 0.05
    done
  }
  _crash_ref_kill() { kill -KILL "$REF_PID"; wait "$REF_PID" 2>/dev/null || true; REF_PID=""; }
  _crash_ref_start
  cw prefill "$uri" --log "$rlog" --blocks $n || fail "selftest: prefill against nbdkit failed"
  cw write "$uri" --log "$rlog" --blocks $n --seed "$CRASH_SEED" --rate 2000 --ready "$WORK/ref.ready" \
    2>"$WORK/ref.writer.log" &
  WRITER_PID=$!
  # Connected first: on a loaded machine the writer's start alone can take
  # longer than the second it is given to write.
  local deadline=$((SECONDS + 20))
  until [[ -e $WORK/ref.ready ]]; do
    kill -0 "$WRITER_PID" 2>/dev/null || fail "selftest: the writer exited before connecting to nbdkit: $(cat "$WORK/ref.writer.log")"
    ((SECONDS < deadline)) || fail "selftest: the writer did not connect to nbdkit in 20 s"
    sleep 0.02
  done
  sleep 1
  _crash_ref_kill
  local rc=0
  wait "$WRITER_PID" || rc=$?
  WRITER_PID=""
  ((rc == 0)) || fail "selftest: the writer exited $rc when nbdkit died: $(cat "$WORK/ref.writer.log")"
  grep -q '^D ' "$rlog" || fail "selftest: no FLUSH completed against nbdkit in 1 s"
  _crash_ref_start
  cw verify "$uri" --log "$rlog" --state "$rstate" --blocks $n >"$WORK/ref.verify.log" 2>&1 ||
    fail "selftest: verify after kill -9 of nbdkit (file plugin) failed: $(cat "$WORK/ref.verify.log")"
  # Block 100 zeroed (its prefill was durable), block 200 torn (one byte).
  dd if=/dev/zero of="$ref" bs=4k seek=100 count=1 conv=notrunc status=none
  # The byte flipped, not overwritten: a fixed value is the block's own
  # byte there once in 256 runs, and then nothing is torn.
  python3 - "$ref" $((200 * 4096 + 1000)) <<'EOF2'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1)[0]
    f.seek(int(sys.argv[2])); f.write(bytes([b ^ 0xff]))
EOF2
  rc=0
  cw verify "$uri" --log "$rlog" --state "$rstate" --blocks $n >"$WORK/ref.verify2.log" 2>&1 || rc=$?
  ((rc == 1)) && grep -q 'block 100 .*reads zeros' "$WORK/ref.verify2.log" &&
    grep -q 'block 200 .*torn' "$WORK/ref.verify2.log" ||
    fail "selftest: verify missed a zeroed and a torn block (exit $rc): $(cat "$WORK/ref.verify2.log")"
  _crash_ref_kill
  log "selftest: nbdkit reference: $(head -n 1 "$WORK/ref.verify.log"); doctored image: caught"
}

# ---- devices and the daemon ----
crash_setup() {
  if [[ ${CRASH_BACKING:-sas} == rbd ]]; then
    ((CRASH_POWERCUT == 0)) || fail "CRASH_BACKING=rbd is a kill -9 harness (a Ceph image has no power to cut)"
    local ceph=$WORK/ceph conf
    conf=$(OSD_WATCH_TIMEOUT=5 "$UBCACHE_SRC/tests/ceph/cluster.sh" start "$ceph") || fail "the Ceph cluster did not start"
    on_exit "'$UBCACHE_SRC/tests/ceph/cluster.sh' stop '$ceph'"
    rbd -c "$conf" create rbd/crash --size "$CRASH_BACKING_SIZE" || fail "rbd create rbd/crash"
    CACHE=$WORK/cache.img
    truncate -s "$CRASH_CACHE_SIZE" "$CACHE"
    CACHE_SPEC=$CACHE
    BACKING_SPEC="rbd,conf=$conf:rbd/crash"
    "$UBCACHE" format --cache "$CACHE" --backing "$BACKING_SPEC" >"$WORK/format.log" 2>&1 ||
      fail "format --backing $BACKING_SPEC: $(cat "$WORK/format.log")"
  elif ((CRASH_POWERCUT)); then
    format_cache_backing "$CRASH_CACHE_SIZE" "$CRASH_BACKING_SIZE"
    # kill -9 drops what the fault layer holds: a power cut of both devices.
    CACHE_SPEC="fault,$CRASH_FAULT,seed=$((CRASH_SEED + 1)):$CACHE"
    BACKING_SPEC="sas:fault,$CRASH_FAULT,seed=$((CRASH_SEED + 2)):$BACKING"
    local err
    err=$("$UBCACHE" show-super "$CACHE_SPEC" 2>&1) ||
      fail "this ubcache cannot open '$CACHE_SPEC' (CRASH_FAULT=$CRASH_FAULT; CRASH_FAULT=drop_unflushed=1 tests the harness meanwhile): $err"
  else
    format_cache_backing "$CRASH_CACHE_SIZE" "$CRASH_BACKING_SIZE"
    CACHE_SPEC=$CACHE
    BACKING_SPEC=sas:$BACKING
  fi
  SERVE_FLAGS=() CTL_KNOBS=()
  local help list kv name skipped=()
  help=$("$UBCACHE" serve --help)
  list=$("$UBCACHE" ctl --list)
  for kv in $CRASH_KNOBS; do
    name=${kv%%=*}
    if grep -qE -- "--${name//_/-}( |$)" <<<"$help"; then
      SERVE_FLAGS+=("--${name//_/-}" "${kv#*=}")
    elif grep -E "^\| $name \|" <<<"$list" | grep -vq "| read-only |"; then
      CTL_KNOBS+=("$kv")
    else
      skipped+=("$name")
    fi
  done
  ((${#skipped[@]} == 0)) || log "knobs this daemon does not offer (skipped): ${skipped[*]}"
  # Writeback at full speed, for the cycles that kill during it.
  WB_KNOBS=()
  for kv in writeback_delay=0 writeback_percent=0 writeback_rate=64M; do
    grep -E "^\| ${kv%%=*} \|" <<<"$list" | grep -vq "| read-only |" && WB_KNOBS+=("$kv")
  done
  log "seed $CRASH_SEED; cache $CACHE_SPEC; backing $BACKING_SPEC; region $CRASH_REGION_MIB MiB; sector $CRASH_SECTOR; acked-durable $CRASH_ACKED_DURABLE;" \
    "serve flags: ${SERVE_FLAGS[*]:-none}; ctl knobs: ${CTL_KNOBS[*]:-none}"
}

crash_serve() {
  start_server --cache "$CACHE_SPEC" --backing "$BACKING_SPEC" --cache-mode writeback --nbd "unix:$SOCK" \
    --control "$CTL_SOCK" --congested-read-threshold-us 0 --congested-write-threshold-us 0 "${SERVE_FLAGS[@]}"
  local kv
  for kv in "${CTL_KNOBS[@]}" "$@"; do
    gctl set "${kv%%=*}" "${kv#*=}" >/dev/null || fail "ctl set ${kv%%=*} ${kv#*=} failed"
  done
}

startup_line() { grep -E "cache set .* (warm|cold) start" "$SERVER_LOG" | tail -n 1 || true; }
# startup_note — "cold start: 0 extents" of the last server.
startup_note() { startup_line | grep -oE '(warm|cold) start: [0-9]+ extents' || echo "no startup line"; }

# kill_server [WHAT] — SIGKILL, reaped: nothing of the daemon runs after
# this. WHAT: the daemon must still be running (it did not die by itself).
kill_server() {
  [[ -z ${1:-} ]] || server_alive "$1"
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# ---- one cycle ----
WARM_CHECKED=0 WARM_COLD=0 TOTAL_WRITES=0 TOTAL_LOST=0
declare -A MODE_COUNT=()

crash_cycle() {
  local i=$1 mode=${MODES[$((RANDOM % ${#MODES[@]}))]} delay wpid t0 note="" bg="" kv
  delay=$(rand "$KILL_MIN" "$KILL_MAX")
  MODE_COUNT[$mode]=$((${MODE_COUNT[$mode]:-0} + 1))
  if [[ $mode == writeback ]]; then
    for kv in "${WB_KNOBS[@]}"; do
      gctl set "${kv%%=*}" "${kv#*=}" >/dev/null || fail "cycle $i: ctl set $kv failed"
    done
  fi
  local ready=$WORK/ready.$i wlog=$WORK/writer.$i.log
  t0=$(date +%s%N)
  cw write "$(nbd_uri)" --log "$CLOG" --blocks $BLOCKS --seed $((CRASH_SEED * 1000 + i)) \
    --rate "$CRASH_RATE" --state "$CSTATE" --sector "$CRASH_SECTOR" --ready "$ready" 2>"$wlog" &
  wpid=$!
  WRITER_PID=$wpid
  local deadline=$((SECONDS + 20))
  until [[ -e $ready ]]; do
    kill -0 "$wpid" 2>/dev/null || fail "cycle $i: the writer exited before connecting: $(cat "$wlog")"
    if ((SECONDS >= deadline)); then
      crash_stacks "cycle $i: the writer did not connect in 20 s"
      fail "cycle $i: the writer did not connect in 20 s"
    fi
    sleep 0.02
  done
  server_alive "cycle $i, writer connected"
  case $mode in
    sleep | writeback) sleep "$(ms_to_s "$delay")"; kill_server "cycle $i, before the kill" ;;
    flush | gc)
      sleep "$(ms_to_s $((delay / 2)))"
      if [[ $mode == flush ]]; then ctl flush >"$WORK/ctl.$i.log" 2>&1 & else ctl trigger-gc >"$WORK/ctl.$i.log" 2>&1 & fi
      bg=$!
      sleep "$(ms_to_s "$(rand 0 40)")"
      kill_server "cycle $i, before the kill during $mode"
      wait "$bg" 2>/dev/null && note="$mode had finished" || note="$mode interrupted"
      ;;
    commit | checkpoint)
      sleep "$(ms_to_s $((delay / 3)))"
      server_alive "cycle $i, before kill-on"
      note=$(crash_guard "kill-on $mode" cw kill-on "$mode" --pid "$SERVER_PID" --control "$CTL_SOCK" --timeout 2 --seed $((CRASH_SEED + i)) 2>&1) ||
        fail "cycle $i: kill-on: $note"
      kill_server
      ;;
  esac
  local ran=$((($(date +%s%N) - t0) / 1000000))
  local rc=0
  local k
  for ((k = 0; k < 600; k++)); do kill -0 "$wpid" 2>/dev/null || break; sleep 0.05; done
  ((k < 600)) || fail "cycle $i: the writer did not exit within 30 s of the kill"
  wait "$wpid" || rc=$?
  WRITER_PID=""
  ((rc == 0)) || fail "cycle $i: the writer exited $rc: $(tail -n 5 "$wlog")"
  local wsum
  wsum=$(grep -o '[0-9]* writes ([0-9]* acked, [0-9]* FUA), [0-9]* flushes ([0-9]* done)' "$wlog" || echo "?")
  [[ ${wsum%% *} =~ ^[0-9]+$ ]] && TOTAL_WRITES=$((TOTAL_WRITES + ${wsum%% *}))

  local t1
  t1=$(date +%s%N)
  crash_serve
  local start
  start=$(startup_note)
  crash_warm_check "$i"
  local vlog=$WORK/verify.$i.log
  gcw verify "$(nbd_uri)" --log "$CLOG" --state "$CSTATE" --blocks $BLOCKS --sector "$CRASH_SECTOR" \
    $([[ ${CRASH_NARROW:-1} == 0 ]] && echo --no-narrow) \
    $([[ $CRASH_ACKED_DURABLE == 1 ]] && echo --acked-durable) >"$vlog" 2>&1 ||
    fail "cycle $i ($mode, killed after ${ran} ms): verify failed:
$(cat "$vlog")
(writer: $wsum; restart: $start)"
  server_alive "cycle $i verify"
  local lost
  lost=$(grep -oE '[0-9]+ lost their last acked' "$vlog" | cut -d' ' -f1 || echo 0)
  TOTAL_LOST=$((TOTAL_LOST + ${lost:-0}))
  log "cycle $i/$CRASH_CYCLES: $mode, killed after ${ran} ms${note:+ ($note)} | writer: $wsum |" \
    "restart: $start | $WARM_NOTE | $(head -n 1 "$vlog" | sed 's/^verify: [^;]*; //') |" \
    "restart+checks $((($(date +%s%N) - t1) / 1000000)) ms"
}

# crash_warm_check I — 4 KiB reads of blocks durable at the kill; the hit
# counter must grow (sets WARM_NOTE).
crash_warm_check() {
  local h0 h1 n
  h0=$(gctl get stats_total/cache_hits) || fail "cycle $1: ctl get stats_total/cache_hits"
  n=$(gcw warm-read "$(nbd_uri)" --log "$CLOG" --state "$CSTATE" --blocks $BLOCKS -n "$CRASH_WARM_BLOCKS" \
    --seed "$1") ||
    fail "cycle $1: warm-read failed"
  h1=$(gctl get stats_total/cache_hits) || fail "cycle $1: ctl get stats_total/cache_hits"
  if ((n == 0)); then
    WARM_NOTE="warm: nothing durable to read"
    return
  fi
  WARM_CHECKED=$((WARM_CHECKED + 1))
  WARM_NOTE="warm: $((h1 - h0))/$n hits"
  if (((h1 - h0) * 100 < n * CRASH_WARM_MIN_PCT)); then
    WARM_COLD=$((WARM_COLD + 1))
    WARM_NOTE+=" (COLD)"
  fi
}

crash_main() {
  local t_start=$SECONDS
  if ((CRASH_SELFTEST && !CRASH_WATCHDOG_SELFCHECK)); then crash_selftest; fi
  crash_setup
  crash_serve
  if ((CRASH_WATCHDOG_SELFCHECK)); then
    crash_watchdog_selfcheck
    kill_server
    return
  fi
  gcw prefill "$(nbd_uri)" --log "$CLOG" --blocks $BLOCKS || fail "prefill failed"
  local t_cycles=$SECONDS i
  for ((i = 1; i <= CRASH_CYCLES; i++)); do crash_cycle "$i"; done
  local per_cycle
  per_cycle=$(awk -v t=$((SECONDS - t_cycles)) -v n="$CRASH_CYCLES" 'BEGIN { printf "%.1f", t / (n > 0 ? n : 1) }')

  # The control: one more writer run that ends by itself (with a FLUSH),
  # a clean stop and a restart, which is warm — and the warm check must
  # say so, or a cold result after kill -9 would prove nothing.
  gcw write "$(nbd_uri)" --log "$CLOG" --blocks $BLOCKS --seed $((CRASH_SEED * 1000)) --rate "$CRASH_RATE" \
    --state "$CSTATE" --sector "$CRASH_SECTOR" --duration 1 2>"$WORK/writer.final.log" || fail "the last writer run failed: $(cat "$WORK/writer.final.log")"
  stop_server
  crash_serve
  startup_line | grep -q "warm start" || fail "the restart after SIGTERM was not warm: $(startup_line)"
  crash_warm_check 0
  log "clean restart: $(startup_note) | $WARM_NOTE"
  [[ $WARM_NOTE != *COLD* && $WARM_NOTE != *nothing* ]] ||
    fail "the warm check failed after a clean (warm) restart: $WARM_NOTE"
  WARM_CHECKED=$((WARM_CHECKED - 1))  # the control is not one of the cycles
  gcw verify "$(nbd_uri)" --log "$CLOG" --state "$CSTATE" --blocks $BLOCKS --sector "$CRASH_SECTOR" \
    $([[ $CRASH_ACKED_DURABLE == 1 ]] && echo --acked-durable) >"$WORK/verify.final.log" 2>&1 ||
    fail "verify after the clean restart failed: $(cat "$WORK/verify.final.log")"
  stop_server

  local modes="" m msg
  for m in "${!MODE_COUNT[@]}"; do modes+="$m ${MODE_COUNT[$m]}, "; done
  log "$CRASH_CYCLES cycles in $((SECONDS - t_start)) s (${per_cycle} s per cycle), $TOTAL_WRITES writes;" \
    "kills: ${modes%, }; seed $CRASH_SEED"
  # Acknowledged, never flushed, and gone after the restart: allowed, and
  # the sign that a power cut did cut (0 is legal too: a daemon may make
  # writes durable sooner than it must).
  log "blocks that lost their last acknowledged (never durable) write, all cycles: $TOTAL_LOST"
  # Restarts whose replay stopped at a soft journal entry a cut kept without
  # its data (doc/design.md "Durability"): the path 126 is there to exercise.
  local unconfirmed
  unconfirmed=$(cat "$WORK"/server.*.log 2>/dev/null | grep -c 'did not all reach the cache device' || true)
  log "restarts whose replay ended at a soft entry whose data the cut lost: ${unconfirmed:-0}"
  ((TOTAL_WRITES > 0)) && grep -q '^D ' "$CLOG" || fail "no write or no FLUSH completed in $CRASH_CYCLES cycles"
  if ((WARM_CHECKED == 0)); then
    msg="warm check: no cycle had a durable block to read back"
  else
    msg="warm check: the restart after kill -9 was cold in $WARM_COLD of $WARM_CHECKED cycles (< $CRASH_WARM_MIN_PCT% hits)"
  fi
  if ((WARM_CHECKED == 0 || WARM_COLD > 0)); then
    if ((CRASH_REQUIRE_WARM)); then soft_fail "$msg"; else log "$msg (CRASH_REQUIRE_WARM=0: not a failure)"; fi
  else
    log "$msg"
  fi
  soft_fail_report
}
