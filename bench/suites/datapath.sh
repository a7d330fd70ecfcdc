#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# datapath — what each server adds between io_uring and the client (issue
# 28 items 2 and 3, issue 29's acceptance rows). fio against every
# configuration below, one workload at a time; per cell IOPS or GB/s, p50
# and p99 of the total latency, the server's CPU per request (utime+stime
# of its process from /proc/PID/stat over the run ÷ fio's requests) and
# the ratio to the raw file in the same round.
#   raw       fio io_uring --direct=1 on the data file itself (reads) or on
#             a file of its own (writes): the disk, no server
#   file      ubcache serve --backing DATA --read-only: a plain file export
#   hit       ubcache serve --cache C --backing B (sequential cutoff and
#             congestion thresholds 0), all of B made resident by one
#             sequential read first: every read a cache hit
#   qemu-nbd  qemu-nbd --read-only --cache=none --aio=io_uring on DATA
#   mem       ubcache serve --backing mem:SIZE (written in full first)
#   nbdkit    nbdkit memory SIZE (written in full first)
#   null      nbdkit null SIZE: no I/O at all, the protocol and fio's client
#   min       bench/nbd_min_responder DATA: the least an io_uring NBD server
#             does for a read (recv, O_DIRECT read, writev, a 200 us poll
#             before it sleeps; nothing else) — what this machine carries
#             with a client, a server and the disk
#   wb        ubcache serve --cache C2 --backing B2 --cache-mode writeback
#             (cutoff and thresholds 0) on a cache formatted afresh before
#             each of its runs, 8 x SIZE: writes land in the cache (below)
#   minw      bench/nbd_min_responder --write on a file of its own: the least
#             an io_uring NBD server does for a write (recv, O_DIRECT write,
#             reply) — the writes' yardstick, as min is the reads'
#   minw0     the same with --spin-us 0 (it sleeps in io_uring_enter at once,
#             no poll): its CPU per write is the kernel's part of one
#             recv, O_DIRECT write and reply on this machine — the floor
#             under issue 29's CPU bar that no server's writes go below
# Workloads: 4 KiB randread QD1 and QD32, 1 MiB sequential read QD8 (raw,
# file, hit, qemu-nbd, min, mem, nbdkit, null); 4 KiB randwrite QD32 and 1 MiB
# sequential write QD8 (raw, wb, minw, minw0, mem, nbdkit, null). NBD configurations go
# through fio's nbd engine (libnbd, one connection). Every server is up for
# the whole run; each round drives every configuration of a workload once,
# the order rotated by one per round (A B C, B C A, ...). Files are SIZE of
# fio-written (random) data on $WORK. The hit daemon's counters around the
# measured reads give the hit ratio.
# The writeback runs: each starts on a freshly formatted cache eight times
# SIZE, so that a run's writes land in the cache, as the configuration
# says, whatever the runs before it wrote. On one 2 x SIZE cache kept for
# the whole suite the 4 KiB rows left it past cutoff_writeback (40 %: every
# bucket holding a dirty block counts), and the 1 MiB rows then measured
# writes sent through to the backing file (37267 cutoff write-throughs, 35
# free buckets of 4096) beside writeback at full speed on the same disk —
# not the cache's write path. A 10 s run of 4 KiB writes at ~60k IOPS dirties
# ~2.4 GB of buckets: under a third of 8 x 1 GiB. The daemon's counters after
# each run (show-wb-TAG.json) say how many writes went past the cache, and
# the acceptance lines say so when any did.
# DATAPATH_UBLK=1 also runs bench/ublk_datapath.sh: the same requests on
# `serve --ublk` beside `serve --nbd` in a qemu guest (vm-run; emulated, so
# functional timings only), into ublk.json: ~5 min (guests serialize on
# vm-run's lock), so it is not on by default.
# Back-to-back sets: a bar that compares servers with each other rather
# than with the raw file of the same round (issue 28's 1 MiB cache hit
# against the file export; its QD1 cache-hit p50 against qemu-nbd's, and
# against the raw file's plus the mem: export's) is judged from DP_SETS
# sets run after the workload's rounds: a set is one DP_SET_SECONDS run of
# each of the bar's configurations back to back, the order rotated by one
# per set, and the bar takes the median of the per-set values. Those
# configurations read different files of one shared disk, whose rate and
# latency drift by more than the bars' margins between runs 80 s apart in
# a round (session 27: 1 MiB hit ÷ file 0.86–1.37 over four runs of the
# same code). The rounds still give every row of the tables.
# Environment: DP_SECONDS (10; --quick 500ms), DP_ROUNDS (2; --quick 1), DP_SIZE
# (1G; --quick 128M), DP_SETS (6; --quick 1), DP_SET_SECONDS (5; --quick
# 500ms), DATAPATH_UBLK (0), FILL (1; --quick 0: files of the right size are
# reused). --quick is a check that the suite works (~1 min on
# an idle machine, ~2 on a loaded one), not a measurement.
set -euo pipefail
. "$(dirname "$0")/common.sh"

FIO=${FIO:-fio}
NBDKIT=${NBDKIT:-nbdkit}
QEMU_NBD=${QEMU_NBD:-qemu-nbd}
PYTHON=${PYTHON:-python3}
if [[ $QUICK == 1 ]]; then d_s=500ms d_r=1 d_size=128M d_sets=1 d_set_s=500ms FILL=${FILL:-0}
else d_s=10 d_r=2 d_size=1G d_sets=6 d_set_s=5; fi
SECONDS_PER=${DP_SECONDS:-$d_s}
ROUNDS=${DP_ROUNDS:-$d_r}
SETS=${DP_SETS:-$d_sets}
SET_SECONDS=${DP_SET_SECONDS:-$d_set_s}
SIZE=${DP_SIZE:-$d_size}
UBLK=${DATAPATH_UBLK:-0}
export FILL=${FILL:-1}

for t in "$FIO" "$NBDKIT" "$QEMU_NBD" "$PYTHON"; do command -v "$t" >/dev/null || { echo "datapath: $t not found" >&2; exit 2; }; done
[[ -x $RESPONDER ]] || { echo "datapath: $RESPONDER is not built (target nbd_min_responder)" >&2; exit 2; }
"$FIO" --enghelp 2>/dev/null | grep -qw nbd || { echo "datapath: this fio has no nbd engine" >&2; exit 2; }
[[ $SECONDS_PER =~ ^[1-9][0-9]*(ms)?$ && $SET_SECONDS =~ ^[1-9][0-9]*(ms)?$ && $ROUNDS =~ ^[1-9][0-9]*$ &&
   $SETS =~ ^[0-9]+$ ]] ||
  { echo "datapath: DP_SECONDS and DP_SET_SECONDS are N (seconds) or Nms, DP_ROUNDS a positive integer," \
      "DP_SETS an integer (0: no back-to-back sets)" >&2; exit 2; }
size=$(to_bytes "$SIZE")
span_of() { if [[ $1 == *ms ]]; then echo "${1%ms} ms"; else echo "$1 s"; fi; }
# A backing device's data starts after its 8 KiB superblock: one MiB more
# keeps every export at least SIZE long. Caches are twice SIZE, so all of a
# backing device fits with room for the index and the writes' garbage.
backing_bytes=$(( size + (1 << 20) ))
cache_bytes=$(( size * 2 ))
wb_cache_bytes=$(( size * 8 ))  # see "The writeback runs" above

DATA=$WORK/datapath-data.img
RAWW=$WORK/datapath-raw-write.img
MINW=$WORK/datapath-min-write.img
HIT_CACHE=$WORK/datapath-hit-cache.img
HIT_BACKING=$WORK/datapath-hit-backing.img
WB_CACHE=$WORK/datapath-wb-cache.img
WB_BACKING=$WORK/datapath-wb-backing.img
bench_setup datapath
trap 'mkdir -p "$SUITE_DIR/fio"; cp "$raw"/fio-*.json "$raw"/*.log "$raw"/*.cmd "$raw"/show-*.json "$SUITE_DIR/fio/" 2>/dev/null; bench_cleanup' EXIT

bench_progress "files: $SIZE of data each, the hit cache $(( cache_bytes >> 20 )) MiB, the writeback cache $(( wb_cache_bytes >> 20 )) MiB, under $WORK"
fill_file "$DATA" "$size"
fill_file "$RAWW" "$size"
fill_file "$MINW" "$size"
fill_file "$HIT_BACKING" "$backing_bytes"
fill_file "$WB_BACKING" "$backing_bytes"
# The caches are filled too: a write into an unwritten extent costs the
# filesystem a conversion the raw file's writes do not pay.
fill_file "$HIT_CACHE" "$cache_bytes"
fill_file "$WB_CACHE" "$wb_cache_bytes"
"$UBCACHE" format --cache "$HIT_CACHE" --backing "$HIT_BACKING" --force >"$raw/format-hit.log" 2>&1 ||
  { cat "$raw/format-hit.log" >&2; die "ubcache format (hit) failed"; }

tuned=(--sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0)
start_server file "$UBCACHE" serve --backing "$DATA" --read-only --nbd "unix:$raw/file.sock" ||
  die "ubcache serve (file export) failed to start"
start_server hit "$UBCACHE" serve --cache "$HIT_CACHE" --backing "$HIT_BACKING" "${tuned[@]}" \
  --nbd "unix:$raw/hit.sock" --control "$raw/hit.ctl" || die "ubcache serve (cache) failed to start"
# fresh_wb: the writeback daemon (re)started on a freshly formatted cache.
fresh_wb() {
  stop_server wb
  rm -f "$raw/wb.ctl"
  "$UBCACHE" format --cache "$WB_CACHE" --backing "$WB_BACKING" --cache-mode writeback --force \
    >"$raw/format-wb.log" 2>&1 || { cat "$raw/format-wb.log" >&2; die "ubcache format (writeback) failed"; }
  start_server wb "$UBCACHE" serve --cache "$WB_CACHE" --backing "$WB_BACKING" --cache-mode writeback "${tuned[@]}" \
    --nbd "unix:$raw/wb.sock" --control "$raw/wb.ctl" || die "ubcache serve (writeback) failed to start"
  for _ in $(seq 100); do [[ -S $raw/wb.ctl ]] && break; sleep 0.05; done
}
fresh_wb
start_server mem "$UBCACHE" serve --backing "mem:$size" --nbd "unix:$raw/mem.sock" ||
  die "ubcache serve (mem:) failed to start"
start_server qemu-nbd "$QEMU_NBD" --read-only --cache=none --aio=io_uring --format=raw --shared=8 --persistent \
  --socket="$raw/qemu-nbd.sock" "$DATA" || die "qemu-nbd failed to start"
start_server min "$RESPONDER" "$raw/min.sock" "$DATA" || die "nbd_min_responder failed to start"
start_server minw "$RESPONDER" --write "$raw/minw.sock" "$MINW" || die "nbd_min_responder --write failed to start"
start_server minw0 "$RESPONDER" --write --spin-us 0 "$raw/minw0.sock" "$MINW" ||
  die "nbd_min_responder --write --spin-us 0 failed to start"
start_server nbdkit "$NBDKIT" -f --exit-with-parent -U "$raw/nbdkit.sock" memory "$size" ||
  die "nbdkit memory failed to start"
start_server null "$NBDKIT" -f --exit-with-parent -U "$raw/null.sock" null "$size" ||
  die "nbdkit null failed to start"
for _ in $(seq 100); do [[ -S $raw/hit.ctl && -S $raw/wb.ctl ]] && break; sleep 0.05; done

# seq_pass NAME RW: one sequential 1 MiB pass over the export NAME.
seq_pass() {
  "$FIO" --name="$2-$1" --ioengine=nbd --uri="${URI[$1]}" --rw="$2" --bs=1m --iodepth=8 --size="$size" \
    --output-format=terse >"$raw/$2-$1.out" 2>&1 || { cat "$raw/$2-$1.out" >&2; die "fio $2 pass over $1 failed"; }
}
bench_progress "writing mem: and nbdkit memory in full; reading $SIZE into the cache"
seq_pass mem write
seq_pass nbdkit write
seq_pass hit read
# The cache writes of the warm-up finish after the reads are answered.
sleep 1

common=(--time_based --randrepeat=0 --norandommap --lat_percentiles=1
        --percentile_list=50:99 --output-format=json --size="$size")
# Workload name -> fio's rw, bs, iodepth.
declare -A WL=([randread_4k_qd1]="randread 4k 1" [randread_4k_qd32]="randread 4k 32" [read_1m_qd8]="read 1m 8"
               [randwrite_4k_qd32]="randwrite 4k 32" [write_1m_qd8]="write 1m 8")
workloads=(randread_4k_qd1 randread_4k_qd32 read_1m_qd8 randwrite_4k_qd32 write_1m_qd8)
# Workload -> the configurations of its back-to-back sets.
declare -A SET_OF=([randread_4k_qd1]="hit qemu-nbd raw mem" [read_1m_qd8]="hit file")
read_configs=(raw file hit qemu-nbd min mem nbdkit null)
servers_all=(file hit wb mem qemu-nbd min minw minw0 nbdkit null)  # every server started above
write_configs=(raw wb minw minw0 mem nbdkit null)

run_one() {  # run_one WORKLOAD CONFIG ROUND [SECONDS]: ROUND is N, or sN for the Nth set
  local w=$1 c=$2 r=$3 len=${4:-$SECONDS_PER} tag="$1-$2-$3" rw bs qd args=() what
  read -r rw bs qd <<<"${WL[$w]}"
  # A writeback run starts on a fresh cache (see the top).
  [[ $c == wb ]] && fresh_wb
  # The writeback daemon's background writeback shares the disk: it runs
  # during the writeback runs, where it is part of the cost, and is paused
  # during every other configuration's writes, which it would slow (without
  # the pause the raw file's 4 KiB writes went from 111k IOPS before the
  # writeback daemon's first writes to 74k after).
  if [[ $rw == *write ]] && running wb; then
    "$UBCACHE" ctl --control "$raw/wb.ctl" set writeback_running "$([[ $c == wb ]] && echo 1 || echo 0)" \
      >/dev/null 2>"$raw/wb-pause.err" || { cat "$raw/wb-pause.err" >&2; failures=$((failures + 1)); }
  fi
  if [[ $c == raw ]]; then
    local f=$DATA
    [[ $rw == *write ]] && f=$RAWW
    args=(--ioengine=io_uring --direct=1 --filename="$f")
  else
    running "$c" || return 0
    args=(--ioengine=nbd --uri="${URI[$c]}")
  fi
  if [[ $r == s* ]]; then what="set ${r#s}/$SETS"; else what="round $r/$ROUNDS"; fi
  bench_progress "$what: $w, $c, $(span_of "$len")"
  echo "$FIO --name=$tag --rw=$rw --bs=$bs --iodepth=$qd --runtime=$len ${common[*]} ${args[*]}" >"$raw/fio-$tag.cmd"
  if ! measured "$tag" "${PID[$c]:-}" "$FIO" --name="$tag" --rw="$rw" --bs="$bs" --iodepth="$qd" --runtime="$len" \
      "${common[@]}" "${args[@]}" --output="$raw/fio-$tag.json" >"$raw/fio-$tag.err" 2>&1; then
    echo "datapath: fio $tag failed:" >&2; cat "$raw/fio-$tag.err" >&2
    failures=$((failures + 1))
  fi
  if [[ $c == wb ]]; then show wb "$tag"; fi
}

show() {  # show DAEMON N: its counters into show-DAEMON-N.json
  "$UBCACHE" ctl --control "$raw/$1.ctl" --json show >"$raw/show-$1-$2.json" 2>"$raw/show-$1-$2.err" ||
    { cat "$raw/show-$1-$2.err" >&2; failures=$((failures + 1)); }
}

show hit 0
for w in "${workloads[@]}"; do
  if [[ $w == *write* ]]; then cs=("${write_configs[@]}"); else cs=("${read_configs[@]}"); fi
  [[ $w == randwrite_4k_qd32 ]] && show hit 1
  k=${#cs[@]}
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < k; i++)); do run_one "$w" "${cs[$(( (i + r - 1) % k ))]}" "$r"; done
  done
  [[ -n ${SET_OF[$w]:-} ]] || continue
  read -ra grp <<<"${SET_OF[$w]}"
  for ((p = 1; p <= SETS; p++)); do
    for ((i = 0; i < ${#grp[@]}; i++)); do run_one "$w" "${grp[$(( (i + p - 1) % ${#grp[@]} ))]}" "s$p" "$SET_SECONDS"; done
  done
done
for s in "${servers_all[@]}"; do running "$s" || true; done
for s in "${servers_all[@]}"; do stop_server "$s"; done

ublk_json=""
if [[ $UBLK == 1 ]]; then
  bench_progress "ublk in a qemu guest (bench/ublk_datapath.sh; emulated: functional timings only)"
  ublk_json=$SUITE_DIR/ublk.json
  uargs=(--seconds 3 --rounds 2 --size 128M)
  [[ $QUICK == 1 ]] && uargs=(--seconds 2 --rounds 1 --size 64M)
  bench_relayed '^== ' - "$bench/ublk_datapath.sh" --ubcache "$UBCACHE" --out "$ublk_json" "${uargs[@]}" ||
    { echo "datapath: bench/ublk_datapath.sh failed" >&2; failures=$((failures + 1)); }
fi

versions="$("$FIO" --version); $("$NBDKIT" --version 2>&1 | head -1); $("$QEMU_NBD" --version | head -1)"
servers=""
for s in "${servers_all[@]}"; do servers+="$s=$(cat "$raw/$s.cmd")"$'\n'; done
PYTHONPATH="$bench" "$PYTHON" "$bench/datapath_result.py" "$raw" "$SUITE_DIR/result.json" "$ROUNDS" \
  "$SECONDS_PER" "$size" "$cache_bytes,$wb_cache_bytes" "$versions" "$servers" "$UBLK" "$ublk_json" "$QUICK" "$SETS" \
  "$SET_SECONDS" ||
  failures=$((failures + 1))
bench_finish
