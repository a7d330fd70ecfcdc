# SPDX-License-Identifier: Apache-2.0
# bench/lib.sh — what the bench scripts share: sizes, filled test files,
# server processes started and stopped by PID, and per-run CPU accounting.
# Source it after `set -euo pipefail`, then call bench_setup NAME.
#
# Conventions: a server NAME listens on $raw/NAME.sock (SOCK[NAME], URI[NAME]),
# logs to $raw/NAME.log; `measured TAG PID CMD...` runs CMD and leaves
# $raw/cpu-TAG.tsv and $raw/stat-TAG.txt for benchlib.py's cpu_of().

# bench_setup NAME: the script's name for messages, a scratch directory
# ($raw, removed at exit with every server still running), failures=0.
bench_setup() {
  BENCH=$1
  raw=$(mktemp -d "${TMPDIR:-/tmp}/$BENCH.XXXXXX")
  failures=0
  declare -gA PID SOCK URI
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

die() { echo "$BENCH: $*" >&2; exit 2; }

# Fails the run (exit 1) at the end when a tool failed on the way.
bench_finish() {
  if [[ $failures -gt 0 ]]; then
    echo "$BENCH: $failures tool failure(s); see above" >&2
    exit 1
  fi
}

# to_bytes SIZE: "512M", "2G", "4k" -> bytes.
to_bytes() {
  "${PYTHON:-python3}" - "$1" <<'PY'
import re, sys
m = re.fullmatch(r'(\d+)([kKmMgGtT]?)i?[bB]?', sys.argv[1])
if not m: sys.exit("bad size")
print(int(m.group(1)) << (10 * " kmgt".index(m.group(2).lower() or " ")))
PY
}

# fill_file PATH BYTES: (re)writes PATH with a fio sequential write unless
# it already has that size and FILL=0, so reads hit real blocks (unwritten
# extents read back as zeros without touching the disk).
fill_file() {
  local cur
  mkdir -p "$(dirname "$1")"
  cur=$(stat -c %s "$1" 2>/dev/null || echo 0)
  if [[ ${FILL:-1} == 1 || $cur != "$2" ]]; then
    echo "== filling $1 ($(( $2 >> 20 )) MiB) with fio sequential write" >&2
    rm -f "$1"
    "${FIO:-fio}" --name=fill --filename="$1" --size="$2" --rw=write --bs=1m --iodepth=8 \
      --ioengine=io_uring --direct=1 --end_fsync=1 --output-format=terse >/dev/null ||
      die "fio fill of $1 failed"
  fi
  if command -v filefrag >/dev/null && filefrag -v "$1" 2>/dev/null | grep -q unwritten; then
    echo "$BENCH: warning: $1 has unwritten extents; reads of them are not real I/O" >&2
  fi
}

# start_server NAME CMD...: CMD stays in the foreground and listens on
# $raw/NAME.sock; waits for the socket.
start_server() {
  local name=$1; shift
  local sock="$raw/$name.sock"
  rm -f "$sock"
  SOCK[$name]=$sock
  URI[$name]="nbd+unix:///?socket=$sock"
  echo "== starting $name: $*" >&2
  echo "$*" >"$raw/$name.cmd"
  "$@" >"$raw/$name.log" 2>&1 &
  PID[$name]=$!
  for _ in $(seq 200); do
    [[ -S $sock ]] && break
    kill -0 "${PID[$name]}" 2>/dev/null || break
    sleep 0.05
  done
  if [[ ! -S $sock ]] || ! kill -0 "${PID[$name]}" 2>/dev/null; then
    echo "$BENCH: $name did not come up:" >&2; cat "$raw/$name.log" >&2
    return 1
  fi
}

# running NAME: is the server up? Counts a failure when it is not.
running() {
  if ! kill -0 "${PID[$1]:-0}" 2>/dev/null; then
    echo "$BENCH: server $1 is not running" >&2; failures=$((failures + 1)); return 1
  fi
}

# stop_server NAME: SIGTERM, wait up to 10 s, then SIGKILL; a non-zero exit
# counts as a failure.
stop_server() {
  local p=${PID[$1]:-}
  [[ -n $p ]] || return 0
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  local rc=0
  wait "$p" 2>/dev/null || rc=$?
  unset "PID[$1]"
  if [[ $rc != 0 ]]; then
    echo "$BENCH: server $1 exited with status $rc:" >&2; tail -20 "$raw/$1.log" >&2
    failures=$((failures + 1))
  fi
}

# Only the servers this script started, by PID.
bench_cleanup() {
  local s
  for s in "${!PID[@]}"; do kill -TERM "${PID[$s]}" 2>/dev/null || true; done
  for s in "${!PID[@]}"; do
    for _ in $(seq 50); do kill -0 "${PID[$s]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${PID[$s]}" 2>/dev/null || true
    wait "${PID[$s]}" 2>/dev/null || true
  done
  rm -rf "$raw"
}

ticks() {  # utime+stime of PID (all threads), in clock ticks
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  s=${s##*) }
  set -- $s
  echo $(( ${12} + ${13} ))
}

# measured TAG PID CMD...: runs CMD, recording wall time, PID's CPU ticks
# (PID may be empty: no server) and the machine's /proc/stat around it.
# Returns CMD's status.
measured() {
  local tag=$1 p=$2 t0 t1 c0 c1 st0 st1 rc=0; shift 2
  st0=$(head -1 /proc/stat); t0=$(date +%s.%N); c0=$([[ -n $p ]] && ticks "$p" || echo 0)
  "$@" || rc=$?
  c1=$([[ -n $p ]] && ticks "$p" || echo 0); t1=$(date +%s.%N); st1=$(head -1 /proc/stat)
  printf '%s\t%s\t%s\t%s\t%s\n' "$t0" "$t1" "$c0" "$c1" "$(getconf CLK_TCK)" >"$raw/cpu-$tag.tsv"
  printf '%s\n%s\n' "$st0" "$st1" >"$raw/stat-$tag.txt"
  return $rc
}

# --- bench/run: progress lines and relayed output --------------------------
# bench/run starts every suite with RUN_SUITE, RUN_INDEX, RUN_TOTAL, RUN_T0
# (epoch seconds of the run's start), RUN_SUITE_T0, RUN_SUITE_EST and
# RUN_LATER_EST (estimated seconds of this suite and of the suites after it)
# and RUN_PROGRESS_FD (the terminal; stdout and stderr go to the suite's log).
# Outside bench/run these are unset and progress lines only go to stderr.

# fmt_dur SECONDS: "45s", "3m05s".
fmt_dur() {
  local s=${1%.*}
  (( s < 0 )) && s=0
  if (( s >= 60 )); then printf '%dm%02ds' $(( s / 60 )) $(( s % 60 )); else printf '%ds' "$s"; fi
}

# progress_line TEXT: "[SUITE i/N] TEXT (elapsed 2m05s, est. left 6m10s)".
progress_line() {
  local now left
  if [[ -z ${RUN_T0:-} ]]; then echo "== $*"; return; fi
  now=$(date +%s)
  left=$(( ${RUN_SUITE_EST:-0} - (now - ${RUN_SUITE_T0:-$now}) ))
  (( left < 0 )) && left=0
  left=$(( left + ${RUN_LATER_EST:-0} ))
  echo "[${RUN_SUITE} ${RUN_INDEX}/${RUN_TOTAL}] $* (elapsed $(fmt_dur $(( now - RUN_T0 ))), est. left $(fmt_dur "$left"))"
}

# bench_progress TEXT: a progress line on stderr (the log) and bench/run's terminal.
bench_progress() {
  local line
  line=$(progress_line "$@")
  echo "$line" >&2
  if [[ -n ${RUN_PROGRESS_FD:-} ]]; then echo "$line" >&"$RUN_PROGRESS_FD"; fi
}

# bench_relay ERE: copies stdin to stderr; lines matching ERE also go to
# bench/run's terminal as progress lines (a leading "== " dropped).
bench_relay() {
  local line
  while IFS= read -r line; do
    printf '%s\n' "$line" >&2
    if [[ -n ${RUN_PROGRESS_FD:-} && $line =~ $1 ]]; then
      progress_line "${line#== }" >&"$RUN_PROGRESS_FD"
    fi
  done
}

# bench_relayed ERE OUT CMD...: runs CMD with its stderr (and its stdout when
# OUT is "-", else stdout goes to the file OUT) through bench_relay ERE;
# returns CMD's status.
bench_relayed() {
  local ere=$1 out=$2 rc e=0; shift 2
  [[ $- == *e* ]] && e=1
  set +e
  # CMD does not get bench/run's terminal (fd 3): a server it leaves behind
  # must not hold bench/run's output open.
  if [[ $out == - ]]; then
    "$@" 2>&1 3>&- | bench_relay "$ere"
  else
    "$@" 2>&1 >"$out" 3>&- | bench_relay "$ere"
  fi
  rc=${PIPESTATUS[0]}
  (( e )) && set -e
  return "$rc"
}
