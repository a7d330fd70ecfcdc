#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tuning — the Ubuntu bcache report's question: what do bcache's defaults
# cost, and which knob buys it back? (sysbench fileio rndrw, 48 threads, SAS
# spindles behind an NVMe cache: untuned 41.35 / 27.59 MiB/s read / written,
# tuned — congested thresholds 0, sequential_cutoff 0 — 161.49 / 107.67.)
#
# Each target is ext4 made fresh on: the backing device alone (`ubcache
# serve --backing sas:FILE`, no cache), the cache file alone (losetup
# --direct-io), or ubcache (a formatted cache file in front of the formatted
# `sas:` backing file) in one of five configurations:
#   untuned   bcache's defaults, spelled out: sequential_cutoff 4M,
#             congested_read/write_threshold_us 2000/20000
#   tuned     the report's tuning: all three 0
#   cutoff0   sequential_cutoff 0 alone (thresholds at the defaults)
#   cong0     congested thresholds 0 alone (cutoff at the default)
#   shipped   no flags: ubcache as it ships (--policy auto: congestion
#             compared with the backing device, the learning cutoff)
#   lba       as shipped but `--set writeback_order=lba` (bcache's address
#             order; as shipped is `flush`, issue 30): writeback only, its
#             cost is wb:shipped / wb:lba (target >= 0.9x at 48 threads)
# in writethrough and in writeback. On each: `sysbench fileio prepare` (a
# file set that fits the cache, written through the target, so the cutoff
# decides what is cached), then sysbench fileio rndrw (16 KiB, O_DIRECT,
# fsync every 100 requests: sysbench's defaults but for O_DIRECT) at 4 and
# at 48 threads, then fio randrw with the same mix (60 % reads, 16 KiB,
# psync, 48 jobs, fsync every 100 writes) over the same files. ubcache's
# counters (hits, misses, bypasses by reason and by op and flag — read,
# write, FUA write, write after a FLUSH — slow cache completions) are
# read after the prepare and after every run.
#
# The targets run in a fixed order, and the whole order is repeated: A B C …
# A B C … (--quick: once, writeback only untuned, tuned and shipped).
# Environment TUNE_SECONDS, TUNE_REPEAT, TUNE_FILESET, TUNE_CONFIGS,
# TUNE_CACHE_SIZE, TUNE_BACKING_SIZE override (issue 29's half-cache case:
# TUNE_CACHE_SIZE=1G TUNE_FILESET=512M TUNE_CONFIGS="wb:tuned wb:shipped");
# TUNE_SERVE_ARGS adds serve flags to every ubcache config (an experiment:
# e.g. `--set writeback_lag_target=0`).
set -euo pipefail
. "$(dirname "$0")/common.sh"

if [[ $QUICK == 1 ]]; then
  secs=${TUNE_SECONDS:-2} repeat=${TUNE_REPEAT:-1} fileset=${TUNE_FILESET:-256M}
  CACHE_SIZE=2G BACKING_SIZE=4G
  configs=(backing cache wt:untuned wt:tuned wt:cutoff0 wt:cong0 wt:shipped wb:untuned wb:tuned wb:shipped)
else
  secs=${TUNE_SECONDS:-20} repeat=${TUNE_REPEAT:-2} fileset=${TUNE_FILESET:-1G}
  CACHE_SIZE=4G BACKING_SIZE=8G
  configs=(backing cache wt:untuned wt:tuned wt:cutoff0 wt:cong0 wt:shipped
           wb:untuned wb:tuned wb:cutoff0 wb:cong0 wb:shipped wb:lba)
fi
[[ -n ${TUNE_CONFIGS:-} ]] && read -ra configs <<<"$TUNE_CONFIGS"
CACHE_SIZE=${TUNE_CACHE_SIZE:-$CACHE_SIZE} BACKING_SIZE=${TUNE_BACKING_SIZE:-$BACKING_SIZE}
CACHE=$WORK/tuning-cache.img
BACKING=$WORK/tuning-backing.img
sized_file "$CACHE" $CACHE_SIZE
sized_file "$BACKING" $BACKING_SIZE
fs_setup

declare -A KNOBS=(
  [untuned]="--sequential-cutoff 4M --congested-read-threshold-us 2000 --congested-write-threshold-us 20000"
  [tuned]="--sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0"
  [cutoff0]="--sequential-cutoff 0 --congested-read-threshold-us 2000 --congested-write-threshold-us 20000"
  [cong0]="--sequential-cutoff 4M --congested-read-threshold-us 0 --congested-write-threshold-us 0"
  [shipped]=""
  [lba]="--set writeback_order=lba"
)
SB=(sysbench fileio --file-num=16 --file-total-size="$fileset" --file-block-size=16384)

# up CONFIG: ext4 on CONFIG's target at $MNT.
up() {
  case $1 in
    backing)
      # A raw device: drop the backing superblock an earlier target formatted.
      dd if=/dev/zero of="$BACKING" bs=1M count=1 conv=notrunc status=none
      serve_up "$SUITE_DIR/server.log" --backing "sas:$BACKING"; fs_up_export ;;
    cache) fs_up_file "$CACHE" ;;
    *)
      local mode=writethrough
      [[ ${1%%:*} == wb ]] && mode=writeback
      "$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --force >"$SUITE_DIR/format.log" 2>&1
      # shellcheck disable=SC2086  # KNOBS holds flags
      serve_up "$SUITE_DIR/server.log" --cache "$CACHE" --backing "sas:$BACKING" --cache-mode "$mode" ${KNOBS[${1#*:}]} \
        ${TUNE_SERVE_ARGS:-}
      fs_up_export ;;
  esac
  fs_mkfs "$SUITE_DIR/mkfs.log"
}

# counters TAG: ubcache's attributes now, as raw/…/counters-TAG.json.
counters() {
  [[ -n $SRV ]] && [[ $CFG == w* ]] || return 0
  ctl --json show >"$OUTP-counters-$1.json"
}

# congestion_watch: the congestion score once a second while a run lasts,
# into $OUTP-congested-TAG.txt; the caller kills it.
congestion_watch() {
  while sleep 1; do ctl --json get congested 2>/dev/null || true; echo; done >"$OUTP-congested-$1.txt"
}

watch_stop() { pkill -P "$1" 2>/dev/null || true; kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

run_sysbench() {  # THREADS
  local tag=sysbench-$1 w=""
  counters "before-$tag"
  [[ $CFG == w* ]] && { congestion_watch "$tag" & w=$!; }
  (cd "$MNT" && "${SB[@]}" --file-test-mode=rndrw --file-extra-flags=direct --threads="$1" --time="$secs" run) \
    >"$OUTP-$tag.txt" 2>&1 || { echo "tuning: sysbench $1 threads on $CFG failed: $(tail -n 3 "$OUTP-$tag.txt")" >&2; exit 1; }
  [[ -n $w ]] && watch_stop "$w"
  counters "after-$tag"
}

run_fio() {  # JOBS
  local tag=fio-$1 w="" files
  files=$(cd "$MNT" && ls test_file.* | sed "s|^|$MNT/|" | paste -sd:)
  counters "before-$tag"
  [[ $CFG == w* ]] && { congestion_watch "$tag" & w=$!; }
  fio --name=randrw --filename="$files" --rw=randrw --rwmixread=60 --bs=16k --direct=1 --ioengine=psync \
    --numjobs="$1" --thread --group_reporting --time_based --runtime="$secs" --fsync=100 \
    --output-format=json --output="$OUTP-$tag.json" >/dev/null 2>"$OUTP-$tag.err" ||
    { echo "tuning: fio $1 jobs on $CFG failed: $(tail -n 3 "$OUTP-$tag.err")" >&2; exit 1; }
  [[ -n $w ]] && watch_stop "$w"
  counters "after-$tag"
}

n=0 total=$(( ${#configs[@]} * repeat ))
for r in $(seq "$repeat"); do
  for CFG in "${configs[@]}"; do
    n=$((n + 1))
    OUTP=$SUITE_DIR/r$r-${CFG/:/-}
    bench_progress "$CFG (repeat $r/$repeat): mkfs, sysbench prepare $fileset, rndrw 4 + 48 threads, fio 48 jobs, $secs s each ($n/$total)"
    up "$CFG"
    t0=$(date +%s.%N)
    (cd "$MNT" && "${SB[@]}" prepare) >"$OUTP-prepare.txt" 2>&1 ||
      { echo "tuning: sysbench prepare on $CFG failed: $(tail -n 3 "$OUTP-prepare.txt")" >&2; exit 1; }
    sync -f "$MNT"
    t1=$(date +%s.%N)
    echo "$t0 $t1" >"$OUTP-prepare.time"
    counters prepare
    run_sysbench 4
    run_sysbench 48
    run_fio 48
    (cd "$MNT" && "${SB[@]}" cleanup) >/dev/null 2>&1 || true
    fs_down
    echo "tuning: $CFG repeat $r: $(grep -E 'read, MiB/s|written, MiB/s' "$OUTP-sysbench-48.txt" | tr -s ' ' | paste -sd' ') (48 threads)"
  done
done

"${PYTHON:-python3}" - "$SUITE_DIR" "$secs" "$repeat" "$fileset" "$CACHE_SIZE" "${configs[@]}" <<'PY'
import json, os, re, sys
d, secs, repeat, fileset, cache_size, configs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]

def sysbench(path):
    t = open(path).read()
    def num(label):
        m = re.search(re.escape(label) + r"\s+([0-9.]+)", t)
        return float(m.group(1)) if m else None
    return {"read_mib_s": num("read, MiB/s:"), "written_mib_s": num("written, MiB/s:"),
            "reads_s": num("reads/s:"), "writes_s": num("writes/s:"), "fsyncs_s": num("fsyncs/s:"),
            "lat_p95_ms": num("95th percentile:"), "lat_max_ms": num("max:")}

def fio(path):
    j = json.load(open(path))["jobs"][0]
    return {"read_mib_s": j["read"]["bw"] / 1024, "written_mib_s": j["write"]["bw"] / 1024,
            "reads_s": j["read"]["iops"], "writes_s": j["write"]["iops"],
            "lat_p95_ms": j["read"]["clat_ns"]["percentile"].get("95.000000", 0) / 1e6}

KEYS = ["stats_total/cache_hits", "stats_total/cache_misses", "stats_total/cache_bypass_hits",
        "stats_total/cache_bypass_misses", "stats_total/bypassed", "sequential_bypasses", "congested_bypasses",
        "congested_slow_ios", "auto_congested_bypasses", "spare_admissions", "ghost_admissions",
        "cache_full_bypasses", "bypasses/read", "bypasses/write", "bypasses/write_fua",
        "bypasses/write_after_flush", "dirty_data", "writeback_written"]

def counters(p, tag):
    def load(t):
        f = f"{p}-counters-{t}.json"
        return json.load(open(f)) if os.path.exists(f) else None
    a, b = load(f"before-{tag}"), load(f"after-{tag}")
    if not a or not b:
        return None
    c = {k: b.get(k, 0) - a.get(k, 0) for k in KEYS if k not in ("dirty_data",)}
    c["dirty_data_after"] = b.get("dirty_data")
    f = f"{p}-congested-{tag}.txt"
    scores = []
    if os.path.exists(f):
        for line in open(f):
            try:
                scores.append(json.loads(line)["congested"])
            except (ValueError, KeyError):
                pass
    c["congested_min"] = min(scores) if scores else None
    return c

out = {"seconds": secs, "repeat": repeat, "fileset": fileset, "cache_size": cache_size, "configs": configs, "runs": {}}
for cfg in configs:
    runs = []
    for r in range(1, repeat + 1):
        p = os.path.join(d, f"r{r}-{cfg.replace(':', '-')}")
        if not os.path.exists(p + "-sysbench-48.txt"):
            continue
        t0, t1 = map(float, open(p + "-prepare.time").read().split())
        run = {"prepare_s": t1 - t0, "sysbench4": sysbench(p + "-sysbench-4.txt"),
               "sysbench48": sysbench(p + "-sysbench-48.txt"), "fio48": fio(p + "-fio-48.json")}
        pc = p + "-counters-prepare.json"
        if os.path.exists(pc):
            j = json.load(open(pc))
            run["prepare_counters"] = {k: j.get(k) for k in KEYS}
        run["counters"] = {t: counters(p, t) for t in ("sysbench-4", "sysbench-48", "fio-48")}
        runs.append(run)
    out["runs"][cfg] = runs
json.dump(out, open(os.path.join(d, "result.json"), "w"), indent=2)
PY
