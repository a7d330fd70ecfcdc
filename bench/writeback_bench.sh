#!/usr/bin/env bash
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
#      it was written (the same fio job, same seed, QD32 through NBD; the
#      model serves requests one at a time in arrival order). Bytes/s of
#      both; target >= 2x.
#  (3) a 4 KiB randread QD1 reader beside 4 randwrite writers (QD8 each) in
#      writeback with writeback_percent 1 (writeback busy), against the same
#      reader alone on the same daemon (no writers, nothing dirty):
#      (3a) the reader's region is not cached: its reads go to the spindle;
#      (3b) the reader's region is warm in the cache (all hits).
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
WB_PERCENT1=40
WB_PERCENT3=1
WB_DELAY=1
REPEAT=2
SEED=7
SECTIONS="1,2,3a,3b"
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
        raw: the same fio job (same seed: the same block sequence) on sas:RAW, QD32
      bytes/s of both; target wb/raw >= 2.
  (3) 4 KiB randread QD1 (--read-seconds) beside 4 randwrite writers (QD8 each,
      over --writer-region, started --warmup s before the reader), against the
      reader alone; writeback_percent $WB_PERCENT3, writeback_delay --wb-delay; ctl flush
      before every run. (3a) reader region not cached (spindle reads),
      (3b) reader region warm in the cache. Target beside/alone >= 0.8.
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
  --writer-fsync N   the writers' fio fdatasync=N (default: $WRITER_FSYNC: none)
  --wb-delay N|default writeback_delay for (3) (default: $WB_DELAY; 'default' keeps the daemon's)
  --repeat N         repeats (pairs) per section; tables show medians and spread (default: $REPEAT)
  --seed N           fio randseed base (default: $SEED)
  --sections LIST    any of 1,2,3a,3b (default: $SECTIONS)
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
    --wb-delay) WB_DELAY=${2:?--wb-delay needs N or default}; shift 2 ;;
    --repeat) REPEAT=${2:?--repeat needs N}; shift 2 ;;
    --seed) SEED=${2:?--seed needs N}; shift 2 ;;
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
for v in SEED THREADS WARMUP WRITER_FSYNC; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "${v,,}: expected an integer"
done
[[ $WB_DELAY == default || $WB_DELAY =~ ^[0-9]+$ ]] || die "--wb-delay: expected an integer or 'default'"
[[ -x $UBCACHE ]] || die "$UBCACHE not found; build first: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2"
for t in "$FIO" "$PYTHON"; do command -v "$t" >/dev/null || die "$t not found"; done
"$FIO" --enghelp 2>/dev/null | grep -qw nbd || die "this fio has no nbd engine"
[[ $DIR == /tmp || $DIR == /tmp/* ]] && echo "writeback_bench: warning: $DIR is under /tmp, which may be tmpfs (no O_DIRECT)" >&2
want1=0; want2=0; want3a=0; want3b=0
IFS=, read -r -a secs <<<"$SECTIONS"
for s in "${secs[@]}"; do
  case "$s" in 1) want1=1 ;; 2) want2=1 ;; 3a) want3a=1 ;; 3b) want3b=1 ;; 3) want3a=1; want3b=1 ;;
    *) die "--sections: unknown section '$s'" ;; esac
done

cache_bytes=$(to_bytes "$CACHE_SIZE") || die "--cache-size: cannot parse '$CACHE_SIZE'"
backing_bytes=$(to_bytes "$BACKING_SIZE") || die "--backing-size: cannot parse '$BACKING_SIZE'"
region1=$(to_bytes "$REGION1") || die "--region1: cannot parse '$REGION1'"
flush_region=$(to_bytes "$FLUSH_REGION") || die "--flush-region: cannot parse '$FLUSH_REGION'"
reader_region=$(to_bytes "$READER_REGION") || die "--reader-region: cannot parse '$READER_REGION'"
warm_region=$(to_bytes "$WARM_REGION") || die "--warm-region: cannot parse '$WARM_REGION'"
writer_region=$(to_bytes "$WRITER_REGION") || die "--writer-region: cannot parse '$WRITER_REGION'"
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

# serve_wb NAME: a freshly formatted cache set in writeback over sas:BACKING,
# control socket $raw/NAME.ctl.
serve_wb() {
  local name=$1
  format_set || die "format failed"
  start_server "$name" "$BIN" serve --cache "$CACHE" --backing "sas:$BACKING" --cache-mode writeback \
    --sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0 \
    --threads "$THREADS" --nbd "unix:$raw/$name.sock" --control "$raw/$name.ctl" ||
    die "ubcache serve ($name) failed to start"
  for _ in $(seq 100); do [[ -S $raw/$name.ctl ]] && return 0; sleep 0.05; done
  die "$name: no control socket $raw/$name.ctl"
}

ctl() { local s=$1; shift; "$BIN" ctl --control "$raw/$s.ctl" "$@"; }
knob() {  # knob SERVER NAME VALUE
  ctl "$1" set "$2" "$3" >>"$raw/ctl.log" 2>&1 || { echo "writeback_bench: ctl set $2 $3 failed:" >&2; tail -3 "$raw/ctl.log" >&2; exit 2; }
}

# wb_io PID: "write_bytes read_bytes cpu_ticks found" of the daemon's
# ub-writeback thread plus its io_uring workers (iou-wrk-TID) still alive:
# the bytes writeback wrote to the backing device, live (writeback_written
# only moves when a pass of up to 64 stripes is marked clean).
wb_io() {
  local p=$1 t wt="" comm w=0 r=0 k=0 x y s
  for t in /proc/"$p"/task/*; do
    if [[ $(cat "$t/comm" 2>/dev/null) == ub-writeback ]]; then wt=${t##*/}; fi
  done
  if [[ -z $wt ]]; then echo "0 0 0 0"; return 0; fi
  for t in /proc/"$p"/task/*; do
    comm=$(cat "$t/comm" 2>/dev/null) || continue
    if [[ $comm == ub-writeback || $comm == "iou-wrk-$wt" ]]; then
      x=$(awk '/^write_bytes/{print $2}' "$t/io" 2>/dev/null || echo 0)
      y=$(awk '/^read_bytes/{print $2}' "$t/io" 2>/dev/null || echo 0)
      s=$(cat "$t/stat" 2>/dev/null) || s=""
      w=$(( w + ${x:-0} )); r=$(( r + ${y:-0} ))
      if [[ -n $s ]]; then s=${s##*) }; set -- $s; k=$(( k + ${12} + ${13} )); fi
    fi
  done
  echo "$w $r $k 1"
}

# snap SERVER TAG: the daemon's counters and knobs, its writeback thread's I/O, the time.
snap() {
  local s=$1 tag=$2
  date +%s.%N >"$raw/t-$tag.txt"
  if ! ctl "$s" --json show >"$raw/show-$tag.json" 2>"$raw/show-$tag.err"; then
    echo "writeback_bench: ctl show ($s, $tag) failed:" >&2; cat "$raw/show-$tag.err" >&2
    failures=$((failures + 1))
  fi
  wb_io "${PID[$s]}" >"$raw/wbio-$tag.txt"
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

stop_keep_log() {  # stop_server, keeping its log under the name stopped-NAME.log
  stop_server "$1"
  cp "$raw/$1.log" "$raw/stopped-$1.log" 2>/dev/null || true
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
    --time_based --runtime="$S1_SECONDS" --norandommap --randseed=$(( SEED + $1 ))
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
        run_fio "w1-$r" "s1-wb-$r" $(s1job "$r")
        snap "w1-$r" "s1-wb-$r-1"
        stop_keep_log "w1-$r"
      else
        # shellcheck disable=SC2046
        run_fio raw "s1-raw-$r" $(s1job "$r")
      fi
    done
  done
fi

# (2) ctl flush of random dirty blocks vs the spindle taking them in write order.
s2job() {  # s2job IOLOG: distinct blocks (fio's random map), the same sequence for the same seed
  echo --name=blocks --rw=randwrite --bs=4k --iodepth=32 --offset=0 --size="$flush_region" \
    --io_size="$flush_bytes" --randseed="$SEED" --write_iolog="$1"
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
        stop_keep_log "w2-$r"
      else
        # shellcheck disable=SC2046
        run_fio raw "s2-raw-$r" $(s2job "$raw/iolog-s2-raw-$r.log")
      fi
    done
  done
fi
[[ -n ${PID[raw]:-} ]] && stop_keep_log raw

# (3) a reader beside four writers, writeback busy, vs the reader alone.
reader_job() {  # reader_job OFFSET SIZE SEED [startdelay]
  echo --name=reader --rw=randread --bs=4k --iodepth=1 --offset="$1" --size="$2" \
    --time_based --runtime="$READ_SECONDS" --norandommap --randseed="$3" ${4:+--startdelay=$4}
}
writers_job() {  # writers_job SEED
  echo --name=writers --rw=randwrite --bs=4k --iodepth=8 --numjobs=4 --offset="$writer_off" \
    --size="$writer_region" --time_based --runtime=$(( WARMUP + READ_SECONDS )) --norandommap \
    --randseed="$1" ${WRITER_FSYNC:+--fdatasync=$WRITER_FSYNC}
}
if [[ $want3a == 1 || $want3b == 1 ]]; then
  serve_wb w3
  knob w3 writeback_percent "$WB_PERCENT3"
  [[ $WB_DELAY != default ]] && knob w3 writeback_delay "$WB_DELAY"
  n=0
  for v in 3a 3b; do
    [[ $v == 3a && $want3a == 0 || $v == 3b && $want3b == 0 ]] && continue
    if [[ $v == 3a ]]; then roff=0; rsize=$reader_region; else roff=$warm_off; rsize=$warm_region; fi
    if [[ $v == 3b ]]; then
      # One sequential 1 MiB read makes the region resident (sequential_cutoff 0).
      run_fio w3 s3b-warmup --name=warmup --rw=read --bs=1m --iodepth=8 --offset="$roff" --size="$rsize"
    fi
    for ((r = 1; r <= REPEAT; r++)); do
      order=(solo beside); (( r % 2 == 0 )) && order=(beside solo)
      for m in "${order[@]}"; do
        n=$((n + 1))
        tag="s$v-$m-$r"
        timed_flush w3 "$tag-flush"
        snap w3 "$tag-0"
        if [[ $m == solo ]]; then
          # shellcheck disable=SC2046
          run_fio w3 "$tag" $(reader_job "$roff" "$rsize" $(( SEED * 1000 + n )))
        else
          # shellcheck disable=SC2046
          run_fio w3 "$tag" $(writers_job $(( SEED * 1000 + 500 + n ))) \
            $(reader_job "$roff" "$rsize" $(( SEED * 1000 + n )) "$WARMUP") &
          fpid=$!
          sleep "$WARMUP"
          snap w3 "$tag-w"
          wait "$fpid" || true
          [[ -s $raw/fio-$tag.json ]] || failures=$((failures + 1))
        fi
        snap w3 "$tag-1"
      done
    done
  done
  timed_flush w3 s3-final-flush
  stop_keep_log w3
fi

# Medians, ratios, targets; JSON + Markdown; tables on stdout.
base="$OUT/writeback_bench-$stamp"
cmdline="bench/writeback_bench.sh --ubcache $UBCACHE --dir $DIR --cache-size $CACHE_SIZE --backing-size $BACKING_SIZE --seconds $S1_SECONDS --region1 $REGION1 --flush-blocks $FLUSH_BLOCKS --flush-region $FLUSH_REGION --read-seconds $READ_SECONDS --warmup $WARMUP --reader-region $READER_REGION --warm-region $WARM_REGION --writer-region $WRITER_REGION --writer-fsync $WRITER_FSYNC --wb-delay $WB_DELAY --repeat $REPEAT --seed $SEED --sections $SECTIONS --threads $THREADS"
git_rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
versions="$("$FIO" --version)"
PYTHONPATH="$here" "$PYTHON" - "$raw" "$base" <<EOF || failures=$((failures + 1))
import sys
cfg = dict(repeat=$REPEAT, s1_seconds=$S1_SECONDS, read_seconds=$READ_SECONDS, warmup=$WARMUP,
           region1=$region1, flush_blocks=$FLUSH_BLOCKS, flush_region=$flush_region, flush_bytes=$flush_bytes,
           reader_region=$reader_region, warm_off=$warm_off, warm_region=$warm_region,
           writer_off=$writer_off, writer_region=$writer_region, writer_fsync=$WRITER_FSYNC,
           wb_percent1=$WB_PERCENT1, wb_percent3=$WB_PERCENT3, wb_delay="$WB_DELAY",
           cache_bytes=$cache_bytes, backing_bytes=$backing_bytes, seed=$SEED, threads=$THREADS,
           sections="$SECTIONS".split(","), dir="$DIR", command="$cmdline", ubcache="$UBCACHE",
           ubcache_sha256_16="$bin_sha", ubcache_mtime="$bin_mtime", ubcache_version="$bin_version",
           ubcache_rev="$git_rev", versions="""$versions""", started="$started")
EOF
true
bench_finish
