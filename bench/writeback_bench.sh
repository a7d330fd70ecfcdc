#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# writeback_bench.sh — what writeback buys and what it costs, one run, one machine.
#
# Answers the writeback issue's bench item, through fio's nbd engine (libnbd),
# everything over a modelled 10k rpm SAS spindle (sas:FILE), in one run:
#  (1) 4 KiB randwrite QD32 over a small region (--region1): ubcache in
#      writeback (formatted cache + formatted backing served as sas:BACKING,
#      --cache-mode writeback, congestion thresholds 0, writeback_percent 40,
#      so dirty data stays under the target) against the spindle alone
#      (ubcache serve --backing sas:RAW, no cache: the same NBD path).
#      Interleaved per repeat; target >= 20x.
#  (2) ctl flush of --flush-blocks distinct random 4 KiB dirty blocks over
#      --flush-region (written in random order with writeback_running 0),
#      against the spindle alone taking the same block sequence in the order
#      it was written (the same fio job: the same block sequence, QD32 through
#      NBD; the model serves requests one at a time in arrival order).
#      Bytes/s of both; target >= 2x.
#  (3) a 4 KiB randread QD1 reader beside 4 randwrite writers (QD8 each) in
#      writeback with writeback_percent 1 (so writeback should be busy),
#      against the same reader alone (same daemon config, no writers, nothing
#      dirty); a fresh daemon per run (SIGTERM restarts keep the cache):
#      (3a) the reader's region is not cached: its reads go to the spindle;
#      (3c) as (3a), with writeback_rate set (--wb-rate) before the writers
#           start, so writeback really writes while the reader runs;
#      (3b) the reader's region is warm in the cache (all hits);
#      (3d) as (3b) with writeback_running 0: no writeback at all, so what
#           (3b) loses beside the writers is the writers' share of the
#           machine (2 cores here), not writeback's. A reference, no target.
#      Target >= 0.8x.
# Server CPU (/proc/PID/stat), machine CPU (/proc/stat), the daemon's knobs
# and counters (ctl --json show) and the bytes its writeback thread wrote
# (/proc/PID/task/TID/io of ub-writeback and its io_uring workers) are
# recorded around every run. Run with --help for the options.
#
# Benchmarks are not tests: the exit status is non-zero only when a tool
# fails (server does not start or dies, fio error, unparsable output), never
# for a slow number.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
BENCH=writeback_bench

DIR=/var/tmp/ubcache-bench
CACHE_SIZE=2G
BACKING_SIZE=1G
REGION1=64M
S1_SECONDS=15
FLUSH_BLOCKS=8192
FLUSH_REGION=64M
READ_SECONDS=10
WARMUP=5
READER_REGION=384M
WARM_REGION=64M
WRITER_REGION=128M
WRITER_FSYNC=0
MODE3=writeback
WB_PERCENT1=40
WB_PERCENT3=1
WB_DELAY=1
WB_RATE=4M
REPEAT=2
SECTIONS="1,2,3a,3c,3b,3d"
THREADS=0
OUT="$repo/bench/results"
UBCACHE=${UBCACHE:-$repo/build/ubcache}
FILL=1
FIO=${FIO:-fio}
PYTHON=${PYTHON:-python3}

usage() {
  cat <<EOF
Usage: bench/writeback_bench.sh [options]

Measures with fio's nbd engine (nbd+unix:///?socket=...), over a modelled
10k rpm SAS spindle (sas:FILE), in one run:
  (1) 4 KiB randwrite QD32 over --region1, --seconds per run:
        wb:  ubcache serve --cache CACHE --backing sas:BACKING --cache-mode writeback
             (writeback_percent $WB_PERCENT1, congestion thresholds 0, formatted afresh per run)
        raw: ubcache serve --backing sas:RAW        (the spindle alone, same NBD path)
      interleaved per repeat; target wb/raw >= 20.
  (2) --flush-blocks distinct random 4 KiB blocks over --flush-region:
        wb:  written with writeback_running 0, then 'ubcache ctl flush' timed
        raw: the same fio job (the same block sequence) on sas:RAW, QD32
      bytes/s of both; target wb/raw >= 2.
  (3) 4 KiB randread QD1 (--read-seconds) beside 4 randwrite writers (QD8 each,
      over --writer-region, started --warmup s before the reader), against the
      reader alone; writeback_percent $WB_PERCENT3, writeback_delay --wb-delay; a fresh
      daemon per run, ctl flush after it. (3a) reader region not cached (spindle
      reads); (3c) as (3a) with writeback_rate --wb-rate set before the writers
      start; (3b) reader region warm in the cache; (3d) as (3b) with
      writeback_running 0 (a reference: the writers' cost without writeback).
      Target beside/alone >= 0.8.
Writes
  OUT/writeback_bench-<timestamp>.json   every run, daemon counters, medians, ratios
  OUT/writeback_bench-<timestamp>.md     the tables printed at the end

Options:
  --quick            short run (~2 min): --seconds 5 --read-seconds 5 --warmup 3
                     --repeat 1 --flush-blocks 2048 --flush-region 16M (later options win)
  --dir DIR          where the device files go (default: $DIR)
  --cache-size SIZE  cache file (default: $CACHE_SIZE)
  --backing-size SIZE backing files, formatted and raw (default: $BACKING_SIZE)
  --seconds N        seconds per run of (1) (default: $S1_SECONDS)
  --region1 SIZE     region written in (1) (default: $REGION1)
  --flush-blocks N   dirty 4 KiB blocks of (2) (default: $FLUSH_BLOCKS; the issue's full size: 32768)
  --flush-region SIZE region of (2) (default: $FLUSH_REGION; full size: 256M)
  --read-seconds N   the reader's seconds per run in (3) (default: $READ_SECONDS)
  --warmup N         writers' head start in (3) (default: $WARMUP)
  --reader-region SIZE uncached reader region of (3a), from offset 0 (default: $READER_REGION)
  --warm-region SIZE cached reader region of (3b), after it (default: $WARM_REGION)
  --writer-region SIZE the writers' region, from half the device (default: $WRITER_REGION)
  --writer-fsync N   the writers' fio fsync=N: an NBD FLUSH after every N writes (fio's
                     nbd engine has no fdatasync) (default: $WRITER_FSYNC: none)
  --mode3 MODE       cache mode of (3)'s daemons: writeback or writethrough (default:
                     $MODE3; bench/suites/fairness.sh runs both)
  --wb-delay N|default writeback_delay for (3) (default: $WB_DELAY; 'default' keeps the daemon's)
  --wb-rate SIZE     (3c): ctl set writeback_rate SIZE before the writers start; the
                     first writeback pass then runs at it instead of the rate a fresh
                     daemon's controller left at 4 KiB/s (default: $WB_RATE)
  --repeat N         repeats (pairs) per section; tables show medians and spread (default: $REPEAT)
  --sections LIST    any of 1,2,3a,3b,3c,3d (3 = all four) (default: $SECTIONS)
  --threads N        ubcache serve --threads (default: $THREADS = server default)
  --out DIR          results directory (default: bench/results)
  --ubcache PATH     ubcache binary (default: \$UBCACHE or build/ubcache); copied
                     to DIR first, so a rebuild during the run does not matter
  --no-fill          reuse existing files of the right size as they are
  -h, --help         this text

Environment: UBCACHE, FIO, PYTHON override the commands. Needs fio (nbd engine), python3.
EOF
}

args=("$@")
for a in "${args[@]}"; do
  if [[ $a == --quick ]]; then
    S1_SECONDS=5; READ_SECONDS=5; WARMUP=3; REPEAT=1; FLUSH_BLOCKS=2048; FLUSH_REGION=16M
  fi
done
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) shift ;;
    --dir) DIR=${2:?--dir needs a directory}; shift 2 ;;
    --cache-size) CACHE_SIZE=${2:?--cache-size needs a size}; shift 2 ;;
    --backing-size) BACKING_SIZE=${2:?--backing-size needs a size}; shift 2 ;;
    --seconds) S1_SECONDS=${2:?--seconds needs N}; shift 2 ;;
    --region1) REGION1=${2:?--region1 needs a size}; shift 2 ;;
    --flush-blocks) FLUSH_BLOCKS=${2:?--flush-blocks needs N}; shift 2 ;;
    --flush-region) FLUSH_REGION=${2:?--flush-region needs a size}; shift 2 ;;
    --read-seconds) READ_SECONDS=${2:?--read-seconds needs N}; shift 2 ;;
    --warmup) WARMUP=${2:?--warmup needs N}; shift 2 ;;
    --reader-region) READER_REGION=${2:?--reader-region needs a size}; shift 2 ;;
    --warm-region) WARM_REGION=${2:?--warm-region needs a size}; shift 2 ;;
    --writer-region) WRITER_REGION=${2:?--writer-region needs a size}; shift 2 ;;
    --writer-fsync) WRITER_FSYNC=${2:?--writer-fsync needs N}; shift 2 ;;
    --mode3) MODE3=${2:?--mode3 needs writeback or writethrough}; shift 2 ;;
    --wb-delay) WB_DELAY=${2:?--wb-delay needs N or default}; shift 2 ;;
    --wb-rate) WB_RATE=${2:?--wb-rate needs a size}; shift 2 ;;
    --repeat) REPEAT=${2:?--repeat needs N}; shift 2 ;;
    --sections) SECTIONS=${2:?--sections needs a list}; shift 2 ;;
    --threads) THREADS=${2:?--threads needs N}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --ubcache) UBCACHE=${2:?--ubcache needs a path}; shift 2 ;;
    --no-fill) FILL=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "writeback_bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

for v in REPEAT S1_SECONDS READ_SECONDS FLUSH_BLOCKS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "${v,,}: expected a positive integer"
done
for v in THREADS WARMUP WRITER_FSYNC; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "${v,,}: expected an integer"
done
[[ $WB_DELAY == default || $WB_DELAY =~ ^[0-9]+$ ]] || die "--wb-delay: expected an integer or 'default'"
[[ $MODE3 == writeback || $MODE3 == writethrough ]] || die "--mode3: expected writeback or writethrough"
[[ -x $UBCACHE ]] || die "$UBCACHE not found; build first: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2"
for t in "$FIO" "$PYTHON"; do command -v "$t" >/dev/null || die "$t not found"; done
"$FIO" --enghelp 2>/dev/null | grep -qw nbd || die "this fio has no nbd engine"
[[ $DIR == /tmp || $DIR == /tmp/* ]] && echo "writeback_bench: warning: $DIR is under /tmp, which may be tmpfs (no O_DIRECT)" >&2
want1=0; want2=0; want3a=0; want3b=0; want3c=0; want3d=0
IFS=, read -r -a secs <<<"$SECTIONS"
for s in "${secs[@]}"; do
  case "$s" in 1) want1=1 ;; 2) want2=1 ;; 3a) want3a=1 ;; 3b) want3b=1 ;; 3c) want3c=1 ;; 3d) want3d=1 ;;
    3) want3a=1; want3b=1; want3c=1; want3d=1 ;;
    *) die "--sections: unknown section '$s'" ;; esac
done

cache_bytes=$(to_bytes "$CACHE_SIZE") || die "--cache-size: cannot parse '$CACHE_SIZE'"
backing_bytes=$(to_bytes "$BACKING_SIZE") || die "--backing-size: cannot parse '$BACKING_SIZE'"
region1=$(to_bytes "$REGION1") || die "--region1: cannot parse '$REGION1'"
flush_region=$(to_bytes "$FLUSH_REGION") || die "--flush-region: cannot parse '$FLUSH_REGION'"
reader_region=$(to_bytes "$READER_REGION") || die "--reader-region: cannot parse '$READER_REGION'"
warm_region=$(to_bytes "$WARM_REGION") || die "--warm-region: cannot parse '$WARM_REGION'"
writer_region=$(to_bytes "$WRITER_REGION") || die "--writer-region: cannot parse '$WRITER_REGION'"
to_bytes "$WB_RATE" >/dev/null || die "--wb-rate: cannot parse '$WB_RATE'"
flush_bytes=$(( FLUSH_BLOCKS * 4096 ))
# A formatted backing device serves from its data_offset (8 KiB): its export
# is that much shorter than the raw file's. Regions are MiB-aligned.
export_bytes=$(( backing_bytes - 8192 ))
writer_off=$(( (backing_bytes / 2) >> 20 << 20 ))
warm_off=$reader_region
(( region1 <= export_bytes && flush_region <= export_bytes )) || die "--region1 and --flush-region must fit the backing device"
(( flush_bytes <= flush_region )) || die "--flush-blocks x 4 KiB must fit --flush-region"
(( reader_region + warm_region <= writer_off )) || die "--reader-region + --warm-region must fit below half the backing device"
(( writer_off + writer_region <= export_bytes )) || die "--writer-region must fit above half the backing device"
(( region1 * 100 < cache_bytes * WB_PERCENT1 )) ||
  echo "writeback_bench: warning: --region1 is not below writeback_percent $WB_PERCENT1 of the cache; dirty data may pass the target" >&2

CACHE="$DIR/writeback_bench-cache.img"
BACKING="$DIR/writeback_bench-backing.img"
RAW="$DIR/writeback_bench-raw.img"

stamp=$(date +%Y%m%d-%H%M%S)
started=$(date "+%Y-%m-%d %H:%M:%S %z")
mkdir -p "$OUT" "$DIR"
bench_setup writeback_bench
# The binary under test, copied: the source tree may be rebuilt meanwhile.
BIN="$DIR/writeback_bench-ubcache.$$"
cp "$UBCACHE" "$BIN"
trap 'bench_cleanup; rm -f "$BIN"' EXIT
bin_sha=$(sha256sum "$BIN" | cut -c1-16)
bin_mtime=$(date -r "$UBCACHE" "+%Y-%m-%d %H:%M:%S %z")
bin_version=$("$BIN" --version 2>&1 || true)

format_set() {
  "$BIN" format --cache "$CACHE" --backing "$BACKING" --cache-mode writeback --force >"$raw/format.log" 2>&1 || {
    echo "writeback_bench: ubcache format failed:" >&2; cat "$raw/format.log" >&2; return 1; }
}

# start_wb NAME [MODE]: ubcache in MODE (writeback) over sas:BACKING (the
# cache set as it is), control socket $raw/NAME.ctl, and a sampler of its
# writeback thread's I/O; serve_wb NAME: the same on a freshly formatted set.
start_wb() {
  local name=$1 mode=${2:-writeback}
  start_server "$name" "$BIN" serve --cache "$CACHE" --backing "sas:$BACKING" --cache-mode "$mode" \
    --sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0 \
    --threads "$THREADS" --nbd "unix:$raw/$name.sock" --control "$raw/$name.ctl" ||
    die "ubcache serve ($name) failed to start"
  for _ in $(seq 100); do [[ -S $raw/$name.ctl ]] && break; sleep 0.05; done
  [[ -S $raw/$name.ctl ]] || die "$name: no control socket $raw/$name.ctl"
  start_sampler "$name"
}
serve_wb() { format_set || die "format failed"; start_wb "$1"; }
stop_wb() { stop_sampler "$1"; stop_server "$1"; }

ctl() { local s=$1; shift; "$BIN" ctl --control "$raw/$s.ctl" "$@"; }
knob() {  # knob SERVER NAME VALUE
  ctl "$1" set "$2" "$3" >>"$raw/ctl.log" 2>&1 || { echo "writeback_bench: ctl set $2 $3 failed:" >&2; tail -3 "$raw/ctl.log" >&2; exit 2; }
}

# wb_tids PID: "TID:write_bytes" of the daemon's ub-writeback thread and of
# its io_uring workers (iou-wrk-TID): what writeback wrote to the backing
# device, live (writeback_written moves only when a pass of up to 64 stripes
# is marked clean). Builtins only: the sampler calls it twice a second.
wb_tids() {
  local p=$1 t wt="" comm k v out=""
  for t in /proc/"$p"/task/*; do
    { read -r comm <"$t/comm"; } 2>/dev/null || continue
    if [[ $comm == ub-writeback ]]; then wt=${t##*/}; break; fi
  done
  [[ -n $wt ]] || return 0
  for t in /proc/"$p"/task/*; do
    { read -r comm <"$t/comm"; } 2>/dev/null || continue
    if [[ $comm == ub-writeback || $comm == "iou-wrk-$wt" ]]; then
      { while read -r k v; do
          if [[ $k == write_bytes: ]]; then out+=" ${t##*/}:$v"; fi
        done <"$t/io"; } 2>/dev/null || true
    fi
  done
  echo "$out"
}

# start_sampler NAME / stop_sampler NAME: every 0.5 s, "time TID:bytes ..."
# into $raw/samples-NAME.txt while server NAME runs. Workers come and go; the
# report sums each TID's last value, so the total only grows.
declare -A SPID
start_sampler() {
  local name=$1 p=${PID[$1]}
  # The sleep runs in the background and is waited for, so stop_sampler's
  # TERM ends it with the loop instead of leaving it behind for 0.5 s.
  ( trap 'kill "$s" 2>/dev/null; exit 0' TERM
    s=
    while kill -0 "$p" 2>/dev/null; do
      echo "$EPOCHREALTIME $(wb_tids "$p")"
      sleep 0.5 & s=$!
      wait "$s"
    done ) >>"$raw/samples-$name.txt" 2>/dev/null &
  SPID[$name]=$!
}
stop_sampler() {
  local sp=${SPID[$1]:-}
  [[ -n $sp ]] || return 0
  echo "$EPOCHREALTIME $(wb_tids "${PID[$1]}")" >>"$raw/samples-$1.txt"
  kill "$sp" 2>/dev/null || true
  wait "$sp" 2>/dev/null || true
  unset "SPID[$1]"
}

# snap SERVER TAG: the daemon's counters and knobs (ctl --json show) and the time.
snap() {
  local s=$1 tag=$2
  echo "$EPOCHREALTIME" >"$raw/t-$tag.txt"
  echo "$s" >"$raw/server-$tag.txt"
  if ! ctl "$s" --json show >"$raw/show-$tag.json" 2>"$raw/show-$tag.err"; then
    echo "writeback_bench: ctl show ($s, $tag) failed:" >&2; cat "$raw/show-$tag.err" >&2
    failures=$((failures + 1))
  fi
}

# run_fio SERVER TAG fio-args...: one fio run (any number of jobs) through
# SERVER's socket; the global options go first, so per-job options follow.
run_fio() {
  local s=$1 tag=$2; shift 2
  running "$s" || return 0
  echo "== $tag ($s)" >&2
  echo "$FIO --ioengine=nbd --uri=${URI[$s]} $*" >"$raw/fio-$tag.cmd"
  if ! measured "$tag" "${PID[$s]}" "$FIO" --ioengine=nbd --uri="${URI[$s]}" --output-format=json \
      --output="$raw/fio-$tag.json" "$@" >"$raw/fio-$tag.err" 2>&1; then
    echo "writeback_bench: fio $tag failed:" >&2; cat "$raw/fio-$tag.err" >&2
    failures=$((failures + 1))
  fi
}

# timed_flush SERVER TAG: ctl flush, wall time recorded as measured TAG.
timed_flush() {
  local s=$1 tag=$2
  running "$s" || return 0
  echo "== $tag: ctl flush ($s)" >&2
  if ! measured "$tag" "${PID[$s]}" ctl "$s" flush >"$raw/flush-$tag.out" 2>&1; then
    echo "writeback_bench: ctl flush ($tag) failed:" >&2; tail -5 "$raw/flush-$tag.out" >&2
    failures=$((failures + 1))
  fi
}

fill_file "$CACHE" "$cache_bytes"
fill_file "$BACKING" "$backing_bytes"
fill_file "$RAW" "$backing_bytes"

if [[ $want1 == 1 || $want2 == 1 ]]; then
  start_server raw "$BIN" serve --backing "sas:$RAW" --threads "$THREADS" --nbd "unix:$raw/raw.sock" ||
    die "ubcache serve (raw) failed to start"
fi

# (1) randwrite QD32: writeback cache vs the spindle alone.
s1job() {
  echo --name=randwrite --rw=randwrite --bs=4k --iodepth=32 --offset=0 --size="$region1" \
    --time_based --runtime="$S1_SECONDS" --norandommap
}
if [[ $want1 == 1 ]]; then
  for ((r = 1; r <= REPEAT; r++)); do
    order=(wb raw); (( r % 2 == 0 )) && order=(raw wb)
    for side in "${order[@]}"; do
      if [[ $side == wb ]]; then
        serve_wb "w1-$r"
        knob "w1-$r" writeback_percent "$WB_PERCENT1"
        snap "w1-$r" "s1-wb-$r-0"
        # shellcheck disable=SC2046
        run_fio "w1-$r" "s1-wb-$r" $(s1job)
        snap "w1-$r" "s1-wb-$r-1"
        stop_wb "w1-$r"
      else
        # shellcheck disable=SC2046
        run_fio raw "s1-raw-$r" $(s1job)
      fi
    done
  done
fi

# (2) ctl flush of random dirty blocks vs the spindle taking them in write order.
s2job() {  # s2job IOLOG: distinct blocks (fio's random map); fio's default
  # randrepeat=1 makes the sequence the same in every run (the iologs check it)
  echo --name=blocks --rw=randwrite --bs=4k --iodepth=32 --offset=0 --size="$flush_region" \
    --io_size="$flush_bytes" --write_iolog="$1"
}
if [[ $want2 == 1 ]]; then
  for ((r = 1; r <= REPEAT; r++)); do
    order=(wb raw); (( r % 2 == 0 )) && order=(raw wb)
    for side in "${order[@]}"; do
      if [[ $side == wb ]]; then
        serve_wb "w2-$r"
        knob "w2-$r" writeback_running 0
        # shellcheck disable=SC2046
        run_fio "w2-$r" "s2-write-$r" $(s2job "$raw/iolog-s2-wb-$r.log")
        snap "w2-$r" "s2-wb-$r-0"
        timed_flush "w2-$r" "s2-flush-$r"
        snap "w2-$r" "s2-wb-$r-1"
        stop_wb "w2-$r"
      else
        # shellcheck disable=SC2046
        run_fio raw "s2-raw-$r" $(s2job "$raw/iolog-s2-raw-$r.log")
      fi
    done
  done
fi
[[ -n ${PID[raw]:-} ]] && stop_server raw

# (3) a reader beside four writers, writeback busy, vs the reader alone.
# A fresh daemon per run (a SIGTERM restart keeps the cache warm), so every
# run starts from the same writeback state: nothing dirty, the controller's
# rate as a new daemon has it. randrepeat=0: fio's default repeats the same
# offsets every run, which would make the "uncached" reader hit what earlier
# runs filled (fio 3.33 ignores randseed here).
reader_job() {  # reader_job OFFSET SIZE [startdelay]
  echo --name=reader --rw=randread --bs=4k --iodepth=1 --offset="$1" --size="$2" \
    --time_based --runtime="$READ_SECONDS" --norandommap --randrepeat=0 ${3:+--startdelay=$3}
}
writers_job() {
  echo --name=writers --rw=randwrite --bs=4k --iodepth=8 --numjobs=4 --offset="$writer_off" \
    --size="$writer_region" --time_based --runtime=$(( WARMUP + READ_SECONDS )) --norandommap --randrepeat=0 \
    $( (( WRITER_FSYNC > 0 )) && echo --fsync="$WRITER_FSYNC")
}
s3_knobs() {
  knob "$1" writeback_percent "$WB_PERCENT3"
  if [[ $WB_DELAY != default ]]; then knob "$1" writeback_delay "$WB_DELAY"; fi
}
if [[ $want3a == 1 || $want3b == 1 || $want3c == 1 || $want3d == 1 ]]; then
  format_set || die "format failed"
  n=0
  for v in 3a 3c 3b 3d; do
    eval "[[ \$want$v == 1 ]]" || continue
    if [[ $v == 3b || $v == 3d ]]; then roff=$warm_off; rsize=$warm_region; else roff=0; rsize=$reader_region; fi
    if [[ $v == 3b || $v == 3d ]]; then
      # One sequential 1 MiB read makes the region resident (sequential_cutoff 0);
      # the clean SIGTERM keeps it for the next daemons.
      start_wb w3-warm "$MODE3"
      run_fio w3-warm s3b-warmup --name=warmup --rw=read --bs=1m --iodepth=8 --offset="$roff" --size="$rsize"
      stop_wb w3-warm
    fi
    for ((r = 1; r <= REPEAT; r++)); do
      order=(solo beside); (( r % 2 == 0 )) && order=(beside solo)
      for m in "${order[@]}"; do
        n=$((n + 1))
        tag="s$v-$m-$r"
        d="w3-$n"
        start_wb "$d" "$MODE3"
        s3_knobs "$d"
        if [[ $v == 3c && $m == beside ]]; then knob "$d" writeback_rate "$WB_RATE"; fi
        if [[ $v == 3d ]]; then knob "$d" writeback_running 0; fi
        snap "$d" "$tag-0"
        if [[ $m == solo ]]; then
          # shellcheck disable=SC2046
          run_fio "$d" "$tag" $(reader_job "$roff" "$rsize")
        else
          # shellcheck disable=SC2046
          run_fio "$d" "$tag" $(writers_job) $(reader_job "$roff" "$rsize" "$WARMUP") &
          fpid=$!
          sleep "$WARMUP"
          snap "$d" "$tag-w"
          wait "$fpid" || true
          [[ -s $raw/fio-$tag.json ]] || failures=$((failures + 1))
        fi
        snap "$d" "$tag-1"
        timed_flush "$d" "$tag-flush"
        snap "$d" "$tag-2"
        stop_wb "$d"
      done
    done
  done
fi

# Medians, ratios, targets; JSON + Markdown; tables on stdout.
base="$OUT/writeback_bench-$stamp"
cmdline="bench/writeback_bench.sh --ubcache $UBCACHE --dir $DIR --cache-size $CACHE_SIZE --backing-size $BACKING_SIZE --seconds $S1_SECONDS --region1 $REGION1 --flush-blocks $FLUSH_BLOCKS --flush-region $FLUSH_REGION --read-seconds $READ_SECONDS --warmup $WARMUP --reader-region $READER_REGION --warm-region $WARM_REGION --writer-region $WRITER_REGION --writer-fsync $WRITER_FSYNC --mode3 $MODE3 --wb-delay $WB_DELAY --wb-rate $WB_RATE --repeat $REPEAT --sections $SECTIONS --threads $THREADS"
git_rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
versions="$("$FIO" --version)"
PYTHONPATH="$here" "$PYTHON" - "$raw" "$base" \
  repeat="$REPEAT" s1_seconds="$S1_SECONDS" read_seconds="$READ_SECONDS" warmup="$WARMUP" region1="$region1" \
  flush_blocks="$FLUSH_BLOCKS" flush_region="$flush_region" flush_bytes="$flush_bytes" \
  reader_region="$reader_region" warm_off="$warm_off" warm_region="$warm_region" writer_off="$writer_off" \
  writer_region="$writer_region" writer_fsync="$WRITER_FSYNC" mode3="$MODE3" wb_percent1="$WB_PERCENT1" wb_percent3="$WB_PERCENT3" \
  wb_delay="$WB_DELAY" wb_rate="$WB_RATE" cache_bytes="$cache_bytes" backing_bytes="$backing_bytes" threads="$THREADS" \
  sections="$SECTIONS" dir="$DIR" command="$cmdline" ubcache="$UBCACHE" ubcache_sha256_16="$bin_sha" \
  ubcache_mtime="$bin_mtime" ubcache_version="$bin_version" ubcache_rev="$git_rev" versions="$versions" \
  started="$started" <<'EOF' || failures=$((failures + 1))
import glob, json, os, platform, re, statistics, sys, time

raw, base = sys.argv[1:3]
cfg = {}
for a in sys.argv[3:]:
    k, v = a.split("=", 1)
    cfg[k] = int(v) if re.fullmatch(r"-?\d+", v) else v
R = cfg["repeat"]
sections = set(str(cfg["sections"]).split(","))
if "3" in sections:
    sections |= {"3a", "3b", "3c", "3d"}
bad = 0
MiB = 1 << 20

from benchlib import load as _load, cpu_of, machine_lines, write_results

def load(p, quiet=False):
    if quiet and not os.path.exists(p):
        return None
    return _load(p, "writeback_bench")

def pct(d, q):
    return d["clat_ns"].get("percentile", {}).get(q, 0) / 1e6

def fio_jobs(tag):
    global bad
    j = load(f"{raw}/fio-{tag}.json")
    if not j or not j.get("jobs") or any(x.get("error") for x in j["jobs"]):
        print(f"writeback_bench: no usable fio result for {tag}", file=sys.stderr)
        bad += 1
        return None
    return j["jobs"]

def one(tag, ddir, job=None):
    """One fio job's numbers (the job named `job`, else the first), with the run's CPU."""
    jobs = fio_jobs(tag)
    if not jobs:
        return None
    sel = [x for x in jobs if job is None or x["jobname"] == job]
    if not sel:
        return None
    x = sel[0]
    d = x[ddir]
    run = {"iops": d["iops"], "ios": d["total_ios"], "bytes": d["io_bytes"], "runtime_s": d["runtime"] / 1e3,
           "p50_ms": pct(d, "50.000000"), "p99_ms": pct(d, "99.000000"),
           "fio_cpu_pct": (x.get("usr_cpu") or 0) + (x.get("sys_cpu") or 0)}
    run.update(cpu_of(raw, tag))
    try:
        run["fio_command"] = open(f"{raw}/fio-{tag}.cmd").read().strip()
    except OSError:
        pass
    return run

def snap(tag):
    s = load(f"{raw}/show-{tag}.json", quiet=True)
    try:
        t = float(open(f"{raw}/t-{tag}.txt").read())
        server = open(f"{raw}/server-{tag}.txt").read().strip()
    except (OSError, ValueError):
        return None
    return {"show": s or {}, "t": t, "server": server}

_series = {}
def wb_series(server):
    """[(time, bytes the writeback thread and its io_uring workers had written)]:
    each TID's last value summed, so workers that exited still count."""
    if server not in _series:
        pts, last = [], {}
        try:
            for l in open(f"{raw}/samples-{server}.txt"):
                f = l.split()
                if not f:
                    continue
                for x in f[1:]:
                    tid, v = x.split(":")
                    last[tid] = max(last.get(tid, 0), int(v))
                pts.append((float(f[0]), sum(last.values())))
        except (OSError, ValueError):
            pass
        _series[server] = pts
    return _series[server]

def wb_written(server, t0, t1):
    """Bytes writeback wrote to the backing device between t0 and t1 (0.5 s samples)."""
    pts = wb_series(server)
    if len(pts) < 2 or t0 is None or t1 is None:
        return None
    def at(t):
        v = pts[0][1]
        for pt, pv in pts:
            if pt <= t:
                v = pv
        return v
    return at(t1) - at(t0)

def run_window(tag):
    """(start, end) wall time of the run `measured TAG` recorded."""
    try:
        t0, t1 = (float(x) for x in open(f"{raw}/cpu-{tag}.tsv").read().split()[:2])
        return t0, t1
    except (OSError, ValueError):
        return None, None

def g(sn, k):
    return (sn or {}).get("show", {}).get(k)

def delta(a, b, k):
    if a is None or b is None:
        return None
    if k == "t":
        return b[k] - a[k]
    x, y = g(a, k), g(b, k)
    return None if x is None or y is None else y - x

def flush_info(tag, server=None):
    c = cpu_of(raw, tag, server=True)
    out = {"wall_s": c.get("wall_s"), "server_cpu_pct": c.get("server_cpu_pct")}
    try:
        txt = open(f"{raw}/flush-{tag}.out").read()
    except OSError:
        txt = ""
    m = re.search(r"flush (\S+): clean, (.+?) written back, (.+?) dirty, ([0-9.]+) s", txt)
    out["reply"] = m.group(0) if m else (txt.strip().splitlines() or [""])[-1]
    out["daemon_s"] = float(m.group(4)) if m else None
    out["progress_lines"] = txt.count("dirty left")
    # The daemon logs "no dirty data left: backing superblock clean" (ms
    # timestamps) when writeback has written everything and flushed the
    # backing device: the drain time without ctl flush's 1 s polling.
    out["drain_s"] = None
    try:
        t0 = float(open(f"{raw}/cpu-{tag}.tsv").read().split()[0])
    except (OSError, ValueError, IndexError):
        return out
    for p in [f"{raw}/{server}.log"] if server else []:
        try:
            for l in open(p, errors="replace"):
                if "no dirty data left" not in l:
                    continue
                m = re.match(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) ", l)
                if not m:
                    continue
                ts = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + float("0" + m.group(1)[19:])
                if ts >= t0 - 0.001 and (out["drain_s"] is None or ts - t0 < out["drain_s"]):
                    out["drain_s"] = ts - t0
        except OSError:
            pass
    return out

def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None

def ratio(a, b):
    return a / b if a is not None and b else None

def spread(v):
    v = [x for x in v if x is not None]
    return (min(v), max(v)) if v else (None, None)

def iolog_offsets(p):
    offs = []
    try:
        for line in open(p):
            t = line.split()
            if len(t) >= 4 and t[-3] == "write":
                offs.append(int(t[-2]))
    except (OSError, ValueError):
        return None
    return offs

def cmd(name):
    try:
        return open(f"{raw}/{name}.cmd").read().strip()
    except OSError:
        return None

def f0(v): return "—" if v is None else f"{v:.0f}"
def f1(v): return "—" if v is None else f"{v:.1f}"
def f2(v): return "—" if v is None else f"{v:.2f}"
def fx(v): return "—" if v is None else f"{v:.2f}×"
def fmib(v): return "—" if v is None else f"{v / MiB:.1f}"
def fsp(lo_hi): return "—" if lo_hi[0] is None else f"{lo_hi[0]:.2f}–{lo_hi[1]:.2f}"

doc = {"config": cfg, "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
summary, notes, targets = [], [], []
def target(name, value, need):
    targets.append({"target": name, "value": value, "need": need, "pass": value is not None and value >= need})
    return "—" if value is None else ("PASS" if value >= need else "MISS")

pairs_txt = f"{R} pair{'s' if R > 1 else ''}"
lines = [f"# ubcache writeback bench — {cfg['started']}", "", f"`{cfg['command']}`", "",
         f"fio nbd engine (libnbd), {platform.node()}, Linux {platform.release()}, {os.cpu_count()} CPUs; "
         f"{cfg['versions']}; {cfg['ubcache_version']} (binary {cfg['ubcache']}, built {cfg['ubcache_mtime']}, "
         f"sha256 {cfg['ubcache_sha256_16']}…; tree {cfg['ubcache_rev']}; --threads {cfg['threads']}); "
         f"files in {cfg['dir']}: cache {cfg['cache_bytes'] >> 20} MiB, backing {cfg['backing_bytes'] >> 20} MiB "
         f"(formatted, served as sas:) and the same size raw (sas:, no cache). {pairs_txt} per section, "
         "interleaved (A B, then B A); ratios are of the medians, spread is the min–max of the per-pair ratios.", ""]
detail = []
busy = []

# (1)
if "1" in sections:
    rows = []
    for r in range(1, R + 1):
        wb, rw = one(f"s1-wb-{r}", "write"), one(f"s1-raw-{r}", "write")
        a, b = snap(f"s1-wb-{r}-0"), snap(f"s1-wb-{r}-1")
        cache_data = (g(b, "nbuckets") or 0) * (g(b, "bucket_size") or 0)
        row = {"wb": wb, "raw": rw, "ratio": ratio(wb and wb["iops"], rw and rw["iops"]),
               "dirty_end": g(b, "dirty_data"), "state_end": g(b, "state"),
               "target_approx": cache_data * cfg["wb_percent1"] // 100 if cache_data else None,
               "writeback_written": delta(a, b, "writeback_written"),
               "wb_thread_written": wb_written(f"w1-{r}", *run_window(f"s1-wb-{r}")),
               "dirty_buckets_pct": g(b, "priority_stats/dirty_percent"),
               "cache_available_pct": g(b, "cache_available_percent")}
        rows.append(row)
        if row["dirty_end"] is not None and row["target_approx"] and row["dirty_end"] > row["target_approx"]:
            notes.append(f"(1) repeat {r}: dirty data {fmib(row['dirty_end'])} MiB passed the target "
                         f"{fmib(row['target_approx'])} MiB")
        if wb and row["dirty_end"] is not None and row["dirty_end"] < min(cfg["region1"], wb["bytes"]) // 2:
            notes.append(f"(1) repeat {r}: only {fmib(row['dirty_end'])} MiB dirty after the run: writes did not stay in the cache")
        if (row["wb_thread_written"] or 0) > 64 * 1024:
            notes.append(f"(1) repeat {r}: writeback wrote {fmib(row['wb_thread_written'])} MiB to the spindle during the run")
    wbm, rwm = med([x["wb"] and x["wb"]["iops"] for x in rows]), med([x["raw"] and x["raw"]["iops"] for x in rows])
    rat, sp = ratio(wbm, rwm), spread([x["ratio"] for x in rows])
    doc["s1_randwrite"] = {"server_wb": cmd("w1-1"), "server_raw": cmd("raw"), "runs": rows,
                           "wb_iops": wbm, "raw_iops": rwm, "ratio": rat, "spread": sp}
    st = target("(1) writeback/spindle 4 KiB randwrite QD32 IOPS >= 20x", rat, 20.0)
    summary.append(f"| (1) 4 KiB randwrite QD32, IOPS | {f0(wbm)} | {f0(rwm)} | {fx(rat)} | "
                   f"{', '.join(f2(x['ratio']) for x in rows)} | {fsp(sp)} | ≥ 20× | {st} |")
    detail += [f"## (1) 4 KiB randwrite QD32 over {cfg['region1'] >> 20} MiB, {cfg['s1_seconds']} s per run", "",
               f"wb: `{cmd('w1-1')}` (formatted afresh per run, `ctl set writeback_percent {cfg['wb_percent1']}`)  ",
               f"raw: `{cmd('raw')}`  ", f"fio: `{(rows[0]['wb'] or {}).get('fio_command', '')}`", "",
               "| repeat | wb IOPS | raw IOPS | wb/raw | wb p50/p99 ms | raw p50/p99 ms | dirty at end MiB (target) | "
               "written back during run MiB | dirty buckets % | wb server CPU % |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, x in enumerate(rows, 1):
        w, rr = x["wb"] or {}, x["raw"] or {}
        detail.append(f"| {i} | {f0(w.get('iops'))} | {f0(rr.get('iops'))} | {f2(x['ratio'])} | "
                      f"{f2(w.get('p50_ms'))}/{f2(w.get('p99_ms'))} | {f1(rr.get('p50_ms'))}/{f1(rr.get('p99_ms'))} | "
                      f"{fmib(x['dirty_end'])} ({fmib(x['target_approx'])}) | {fmib(x['wb_thread_written'])} | "
                      f"{x['dirty_buckets_pct'] if x['dirty_buckets_pct'] is not None else '—'} | {f0(w.get('server_cpu_pct'))} |")
        for run in (x["wb"], x["raw"]):
            if run and "machine" in run:
                busy.append(run["machine"])
    detail.append("")

# (2)
if "2" in sections:
    rows = []
    nbytes = cfg["flush_bytes"]
    ref = None
    for r in range(1, R + 1):
        wr, rw = one(f"s2-write-{r}", "write"), one(f"s2-raw-{r}", "write")
        fl = flush_info(f"s2-flush-{r}", f"w2-{r}")
        a, b = snap(f"s2-wb-{r}-0"), snap(f"s2-wb-{r}-1")
        ow, orw = iolog_offsets(f"{raw}/iolog-s2-wb-{r}.log"), iolog_offsets(f"{raw}/iolog-s2-raw-{r}.log")
        ref = ref if ref is not None else ow
        same = ow is not None and ow == orw and ow == ref
        distinct = len(set(ow)) if ow else None
        wb_bps = nbytes / fl["wall_s"] if fl.get("wall_s") else None
        raw_bps = rw["bytes"] / rw["runtime_s"] if rw and rw["runtime_s"] else None
        row = {"write": wr, "flush": fl, "raw": rw, "wb_bytes_per_s": wb_bps, "raw_bytes_per_s": raw_bps,
               "ratio": ratio(wb_bps, raw_bps), "same_sequence": same,
               "ratio_by_drain": ratio(nbytes / fl["drain_s"] if fl.get("drain_s") else None, raw_bps), "distinct_blocks": distinct,
               "dirty_before": g(a, "dirty_data"), "dirty_after": g(b, "dirty_data"),
               "written_before_flush": g(a, "writeback_written"), "written_by_flush": delta(a, b, "writeback_written"),
               "state_after": g(b, "state")}
        rows.append(row)
        if not same:
            notes.append(f"(2) repeat {r}: the wb and raw block sequences differ (fio iologs)")
        if distinct is not None and distinct != cfg["flush_blocks"]:
            notes.append(f"(2) repeat {r}: {distinct} distinct blocks written, expected {cfg['flush_blocks']}")
        if row["dirty_before"] is not None and row["dirty_before"] != nbytes:
            notes.append(f"(2) repeat {r}: {row['dirty_before']} bytes dirty before the flush, expected {nbytes}")
        if row["written_before_flush"]:
            notes.append(f"(2) repeat {r}: {row['written_before_flush']} bytes written back before the flush "
                         "although writeback_running was 0")
        if row["dirty_after"] not in (0, None) or (row["state_after"] not in (None, "clean")):
            notes.append(f"(2) repeat {r}: after the flush {row['dirty_after']} bytes dirty, state {row['state_after']}")
        for run in (wr, rw):
            if run and "machine" in run:
                busy.append(run["machine"])
    wbm, rwm = med([x["wb_bytes_per_s"] for x in rows]), med([x["raw_bytes_per_s"] for x in rows])
    rat, sp = ratio(wbm, rwm), spread([x["ratio"] for x in rows])
    doc["s2_flush"] = {"server_wb": cmd("w2-1"), "server_raw": cmd("raw"), "runs": rows,
                       "wb_bytes_per_s": wbm, "raw_bytes_per_s": rwm, "ratio": rat, "spread": sp}
    st = target("(2) ctl flush / spindle in write order, bytes/s >= 2x", rat, 2.0)
    scale = "" if cfg["flush_blocks"] == 32768 and cfg["flush_region"] == 256 * MiB else \
        f" (scaled down from 32768 over 256 MiB)"
    summary.append(f"| (2) flush {cfg['flush_blocks']} random 4 KiB dirty blocks over {cfg['flush_region'] >> 20} MiB{scale}, "
                   f"MiB/s | {f2(wbm and wbm / MiB)} | {f2(rwm and rwm / MiB)} | {fx(rat)} | "
                   f"{', '.join(f2(x['ratio']) for x in rows)} | {fsp(sp)} | ≥ 2× | {st} |")
    detail += [f"## (2) ctl flush of {cfg['flush_blocks']} distinct random 4 KiB blocks ({nbytes >> 20} MiB) "
               f"over {cfg['flush_region'] >> 20} MiB{scale}", "",
               f"wb: `{cmd('w2-1')}` (formatted afresh per repeat, `ctl set writeback_running 0`, blocks written "
               "QD32 in fio's random order, then `ubcache ctl flush` timed by wall clock: the daemon's Drain polls "
               "once a second, so the time includes up to ~1 s of polling slack)  ",
               f"raw: `{cmd('raw')}`: the same fio job (fio's default randrepeat=1: the same block sequence, checked in fio's "
               "iologs) at QD32 through the same NBD path; the model serves one request at a time in arrival order, "
               "so the spindle takes the blocks in the order written; time = fio's job runtime  ",
               f"fio: `{(rows[0]['raw'] or {}).get('fio_command', '')}`", "",
               "| repeat | flush s (daemon says; drained per log) | flush MiB/s | raw s | raw MiB/s | flush/raw | same sequence | "
               "dirty before → after | written back by flush MiB | before flush (running 0) |",
               "|---|---:|---:|---:|---:|---:|---|---|---:|---:|"]
    for i, x in enumerate(rows, 1):
        fl, rr = x["flush"], x["raw"] or {}
        detail.append(f"| {i} | {f2(fl.get('wall_s'))} ({f1(fl.get('daemon_s'))}; {f2(fl.get('drain_s'))}) | {f2(x['wb_bytes_per_s'] and x['wb_bytes_per_s'] / MiB)} | "
                      f"{f2(rr.get('runtime_s'))} | {f2(x['raw_bytes_per_s'] and x['raw_bytes_per_s'] / MiB)} | {f2(x['ratio'])} ({f2(x['ratio_by_drain'])}) | "
                      f"{'yes' if x['same_sequence'] else 'NO'} ({x['distinct_blocks']} distinct) | "
                      f"{fmib(x['dirty_before'])} → {fmib(x['dirty_after'])} MiB | {fmib(x['written_by_flush'])} | "
                      f"{x['written_before_flush']} B |")
    detail += ["", f"Flush replies: " + "; ".join(f"`{x['flush']['reply']}`" for x in rows), ""]

# (3)
def s3(v):
    rows = {"solo": [], "beside": []}
    for r in range(1, R + 1):
        for m in ("solo", "beside"):
            tag = f"s{v}-{m}-{r}"
            rd = one(tag, "read", "reader")
            jobs = fio_jobs(tag) if m == "beside" else []
            wiops = sum(x["write"]["iops"] for x in (jobs or []) if x["jobname"] == "writers") if m == "beside" else None
            a, w, b, c = snap(f"{tag}-0"), snap(f"{tag}-w") if m == "beside" else None, snap(f"{tag}-1"), snap(f"{tag}-2")
            server = (a or {}).get("server")
            t0, t1 = run_window(tag)
            # The reader ran for its runtime up to the end of the fio run (the
            # writers, started --warmup s earlier, end with it).
            r0 = t1 - rd["runtime_s"] if rd and t1 else None
            hits = delta(a, b, "stats_total/cache_hits")
            miss = delta(a, b, "stats_total/cache_misses")
            fl = flush_info(f"{tag}-flush", server)
            row = {"server": server, "reader": rd, "writers_iops": wiops, "flush_after": fl,
                   "reader_hit_pct": 100.0 * hits / (hits + miss) if hits is not None and miss is not None and hits + miss else None,
                   "dirty_start": g(a, "dirty_data"), "dirty_reader_start": g(w or a, "dirty_data"), "dirty_end": g(b, "dirty_data"),
                   "dirty_after_flush": g(c, "dirty_data"), "state_after_flush": g(c, "state"),
                   "wb_written_reader": wb_written(server, r0, t1), "reader_window_s": rd["runtime_s"] if rd else None,
                   "wb_written_run": wb_written(server, t0, t1),
                   "writeback_written_run": delta(a, b, "writeback_written"),
                   "writeback_rate_start": g(a, "writeback_rate"), "writeback_rate_end": g(b, "writeback_rate"),
                   "dirty_buckets_pct_end": g(b, "priority_stats/dirty_percent"),
                   "target_approx": (g(b, "nbuckets") or 0) * (g(b, "bucket_size") or 0) * cfg["wb_percent3"] // 100}
            rows[m].append(row)
            if rd and "machine" in rd:
                busy.append(rd["machine"])
            wr = row["wb_written_reader"]
            if m == "beside" and v != "3d" and (wr or 0) < MiB:
                notes.append(f"({v}) repeat {r}: writeback wrote only {(wr or 0) / 1024:.0f} KiB to the spindle in the "
                             f"{f1(row['reader_window_s'])} s the reader ran beside the writers (dirty "
                             f"{fmib(row['dirty_reader_start'])} → {fmib(row['dirty_end'])} MiB, target ~"
                             f"{fmib(row['target_approx'])} MiB, writeback_rate {row['writeback_rate_end']} B/s at the "
                             "end): writeback was not busy, so this pair did not measure a reader beside writeback")
            if m == "solo" and (row["wb_written_run"] or 0) > MiB:
                notes.append(f"({v}) repeat {r}: writeback wrote {fmib(row['wb_written_run'])} MiB during the solo run")
            if row["dirty_after_flush"] not in (0, None) or row["state_after_flush"] not in (None, "clean"):
                notes.append(f"({v}) repeat {r} {m}: after the flush {row['dirty_after_flush']} bytes dirty, "
                             f"state {row['state_after_flush']}: {fl.get('reply')}")
            if v not in ("3b", "3d") and row["reader_hit_pct"] is not None and row["reader_hit_pct"] > 10:
                notes.append(f"({v}) repeat {r} {m}: {row['reader_hit_pct']:.1f} % of the reader's reads hit the cache")
            if v in ("3b", "3d") and row["reader_hit_pct"] is not None and row["reader_hit_pct"] < 99:
                notes.append(f"({v}) repeat {r} {m}: only {row['reader_hit_pct']:.1f} % of the reader's reads hit the cache")
    solo = med([x["reader"] and x["reader"]["iops"] for x in rows["solo"]])
    beside = med([x["reader"] and x["reader"]["iops"] for x in rows["beside"]])
    per = [ratio(b["reader"] and b["reader"]["iops"], s["reader"] and s["reader"]["iops"])
           for s, b in zip(rows["solo"], rows["beside"])]
    return {"runs": rows, "solo_iops": solo, "beside_iops": beside, "ratio": ratio(beside, solo),
            "ratio_per_pair": per, "spread": spread(per)}

if sections & {"3a", "3b", "3c", "3d"}:
    doc["s3_server"] = cmd("w3-1")
    detail += [f"## (3) 4 KiB randread QD1 beside 4 writers (randwrite 4 KiB QD8 each"
               f"{', fsync=' + str(cfg['writer_fsync']) if cfg['writer_fsync'] else ''}) vs alone, "
               f"{cfg['read_seconds']} s reader window", "",
               f"`{cmd('w3-1')}` (a fresh daemon per run on one cache set, formatted once: a SIGTERM restart keeps "
               f"the cache), `ctl set writeback_percent {cfg['wb_percent3']}`"
               f"{'' if cfg['wb_delay'] == 'default' else ', `ctl set writeback_delay ' + str(cfg['wb_delay']) + '`'}; "
               "`ctl flush` after every run, so each starts with nothing dirty. "
               f"Writers over {cfg['writer_region'] >> 20} MiB at {cfg['writer_off'] >> 20} MiB, started "
               f"{cfg['warmup']} s before the reader (one fio process, one NBD connection per job; fio randrepeat=0, "
               "so no run repeats another's offsets). \"written back\" = bytes the daemon's ub-writeback thread and "
               "its io_uring workers wrote while the reader ran (/proc/PID/task/TID/io sampled every 0.5 s); "
               "reader hits from the ctl stats_total delta.", ""]
    variants = (("3a", "reader region not cached (reads go to the spindle)", 0, cfg["reader_region"]),
                ("3c", f"as (3a), writeback_rate set to {cfg['wb_rate']}/s before the writers start", 0, cfg["reader_region"]),
                ("3b", "reader region warm in the cache", cfg["warm_off"], cfg["warm_region"]),
                ("3d", "as (3b), writeback_running 0: the writers without writeback (reference, no target)",
                 cfg["warm_off"], cfg["warm_region"]))
    for v, label, off, size in variants:
        if v not in sections:
            continue
        x = s3(v)
        doc["s" + v] = x
        doc["s" + v]["region"] = [off, size]
        doc["s" + v]["label"] = label
        st = target(f"({v}) reader beside writers / alone, IOPS >= 0.8 — {label}", x["ratio"], 0.8) \
            if v != "3d" else "reference"
        summary.append(f"| ({v}) 4 KiB randread QD1 beside 4 writers vs alone, {label}, IOPS | {f0(x['beside_iops'])} | "
                       f"{f0(x['solo_iops'])} | {fx(x['ratio'])} | {', '.join(f2(p) for p in x['ratio_per_pair'])} | "
                       f"{fsp(x['spread'])} | {'≥ 0.8×' if v != '3d' else '—'} | {st} |")
        fio_cmd = ((x["runs"]["beside"] or [{}])[0].get("reader") or {}).get("fio_command", "")
        detail += [f"### ({v}) {label}: {size >> 20} MiB at {off >> 20} MiB", "", f"fio (beside): `{fio_cmd}`", "",
                   "| repeat | run | reader IOPS | p50/p99 ms | reader hits % | writers IOPS | dirty at reader start → end MiB | "
                   "written back while reading MiB | writeback_rate start → end KiB/s | flush after s | server CPU % |",
                   "|---|---|---:|---:|---:|---:|---|---:|---|---:|---:|"]
        for m in ("solo", "beside"):
            for i, y in enumerate(x["runs"][m], 1):
                rd = y["reader"] or {}
                rs, re_ = y["writeback_rate_start"], y["writeback_rate_end"]
                detail.append(f"| {i} | {m} | {f0(rd.get('iops'))} | {f2(rd.get('p50_ms'))}/{f2(rd.get('p99_ms'))} | "
                              f"{f1(y['reader_hit_pct'])} | {f0(y['writers_iops'])} | "
                              f"{fmib(y['dirty_reader_start'])} → {fmib(y['dirty_end'])} | {fmib(y['wb_written_reader'])} | "
                              f"{f0(rs and rs / 1024)} → {f0(re_ and re_ / 1024)} | "
                              f"{f1(y['flush_after'].get('wall_s'))} | {f0(rd.get('server_cpu_pct'))} |")
        detail.append("")

# Daemon logs: warnings and errors.
logs = {}
for p in sorted(glob.glob(f"{raw}/*.log")):
    name = os.path.basename(p)[:-4]
    if name in ("format", "ctl"):
        continue
    try:
        wl = [l.rstrip() for l in open(p, errors="replace") if re.match(r"^\S+ \S+ [WE] \[", l)]
    except OSError:
        continue
    logs[name] = wl
doc["daemon_warnings"] = logs
nwarn = sum(len(v) for v in logs.values())

out = lines + ["| measure | ubcache | baseline | ratio | per pair | spread | target | |",
               "|---|---:|---:|---:|---|---|---|---|"]
out += summary
out += ["", "Baselines: (1) the spindle alone through `ubcache serve --backing sas:RAW` (same NBD path); "
        "(2) the same blocks written to it directly in write order; (3) the same reader on the same daemon, "
        "writers not running, nothing dirty.", ""]
out += detail
out += machine_lines(busy)
out += ["Checks:", ""]
out += [f"- {n}" for n in notes] or ["- nothing unusual in the daemon's counters"]
out += [f"- daemon logs: {nwarn} warning/error line(s)" + ("" if not nwarn else ":")]
for k, v in logs.items():
    for l in v[:5]:
        out.append(f"    - {k}: `{l}`")
    if len(v) > 5:
        out.append(f"    - {k}: … {len(v) - 5} more")
out += ["", "Targets (writeback issue):", ""]
for t in targets:
    shown = "—" if t["value"] is None else f"{t['value']:.2f}"
    out.append(f"    {'PASS' if t['pass'] else 'MISS'} {t['target']}: {shown}")
doc["notes"] = notes
doc["targets"] = targets
doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
write_results(base, doc, "\n".join(out) + "\n")
sys.exit(1 if bad else 0)
EOF
bench_finish
