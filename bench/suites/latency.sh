#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# latency — what does one cache hit cost? 4 KiB randread QD1 (fio), p50,
# p99 and p99.9 of the total latency (submit to completion), on
#   ubcache     ubcache serve --cache CACHE --backing sas:BACKING (congestion
#               thresholds 0, sequential cutoff 0) over a region made
#               resident by one sequential read: every read a cache hit
#   raw         fio io_uring --direct=1 on the cache file itself
#   nbdkit      nbdkit file CACHE cache=none (read-only), through NBD
#   qemu-nbd    qemu-nbd --cache=none --aio=io_uring (read-only), through NBD
#   null        nbdkit null: a server that does no I/O, i.e. the protocol's
#               and the client's own cost
#   file        ubcache serve --backing FILE --read-only, no cache: ubcache
#               as a plain file export (FILE is a third file of LAT_WS, so
#               as not to share the cache file with the cache daemon)
# Then the same at QD32 (IOPS is the measure there): ubcache's cache hit,
# the file export, the raw export file through fio io_uring, and nbdkit
# null. The issue's bar: the file export at QD32 ≥ the no-op server's IOPS,
# which the raw file's own QD32 row bounds from above.
# All NBD configurations go through fio's nbd engine (libnbd, one
# connection). raw, nbdkit and qemu-nbd read the same-sized region of the
# same cache file, in its upper half (filled by fio, away from ubcache's
# metadata area). Every server is up for the whole run; each repeat drives
# every configuration in turn, the order rotated by one per repeat (A B C,
# B C A, ...), so the ratios come from one run with their spread.
# The hit ratio of the measured ubcache runs is read from the daemon's
# counters (ctl --json show before and after).
# Environment: LAT_SECONDS (5; --quick 3), LAT_REPEAT (4; --quick 2),
# LAT_WS (256M; --quick 128M), LAT_CACHE_SIZE (1G), LAT_BACKING_SIZE (512M).
set -euo pipefail
. "$(dirname "$0")/common.sh"

FIO=${FIO:-fio}
NBDKIT=${NBDKIT:-nbdkit}
QEMU_NBD=${QEMU_NBD:-qemu-nbd}
PYTHON=${PYTHON:-python3}
if [[ $QUICK == 1 ]]; then d_s=2 d_r=2 d_ws=128M FILL=${FILL:-0}; else d_s=5 d_r=4 d_ws=256M; fi
SECONDS_PER=${LAT_SECONDS:-$d_s}
REPEAT=${LAT_REPEAT:-$d_r}
WS=${LAT_WS:-$d_ws}
CACHE_SIZE=${LAT_CACHE_SIZE:-1G}
BACKING_SIZE=${LAT_BACKING_SIZE:-512M}
export FILL=${FILL:-1}

for t in "$FIO" "$NBDKIT" "$QEMU_NBD" "$PYTHON"; do command -v "$t" >/dev/null || { echo "latency: $t not found" >&2; exit 2; }; done
"$FIO" --enghelp 2>/dev/null | grep -qw nbd || { echo "latency: this fio has no nbd engine" >&2; exit 2; }
cache_bytes=$(to_bytes "$CACHE_SIZE")
backing_bytes=$(to_bytes "$BACKING_SIZE")
ws_bytes=$(to_bytes "$WS")
(( ws_bytes * 2 <= cache_bytes )) || { echo "latency: LAT_WS must be at most half of LAT_CACHE_SIZE" >&2; exit 2; }
(( ws_bytes + (1 << 20) <= backing_bytes )) || { echo "latency: LAT_WS must fit the backing file" >&2; exit 2; }
half=$(( cache_bytes / 2 ))

CACHE=$WORK/latency-cache.img
BACKING=$WORK/latency-backing.img
EXPORT=$WORK/latency-file.img
bench_setup latency
# Raw fio JSON is kept with the results; the scratch dir goes at exit.
trap 'mkdir -p "$SUITE_DIR/fio"; cp "$raw"/fio-*.json "$raw"/*.log "$raw"/*.cmd "$SUITE_DIR/fio/" 2>/dev/null; bench_cleanup' EXIT

bench_progress "files: cache $CACHE_SIZE, backing $BACKING_SIZE under $WORK"
fill_file "$CACHE" "$cache_bytes"
fill_file "$BACKING" "$backing_bytes"
fill_file "$EXPORT" "$ws_bytes"
"$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --force >"$raw/format.log" 2>&1 ||
  { cat "$raw/format.log" >&2; die "ubcache format failed"; }

CTL=$raw/ubcache.ctl
start_server ubcache "$UBCACHE" serve --cache "$CACHE" --backing "sas:$BACKING" \
  --sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0 \
  --nbd "unix:$raw/ubcache.sock" --control "$CTL" || die "ubcache serve failed to start"
for _ in $(seq 100); do [[ -S $CTL ]] && break; sleep 0.05; done
start_server nbdkit "$NBDKIT" -f -r --exit-with-parent -U "$raw/nbdkit.sock" file "$CACHE" cache=none ||
  die "nbdkit file failed to start"
start_server qemu-nbd "$QEMU_NBD" --read-only --cache=none --aio=io_uring --format=raw --shared=8 --persistent \
  --socket="$raw/qemu-nbd.sock" "$CACHE" || die "qemu-nbd failed to start"
start_server null "$NBDKIT" -f --exit-with-parent -U "$raw/null.sock" null "$ws_bytes" ||
  die "nbdkit null failed to start"
start_server file "$UBCACHE" serve --backing "$EXPORT" --read-only --nbd "unix:$raw/file.sock" ||
  die "ubcache serve (file export) failed to start"

bench_progress "warming $WS into the cache (one sequential 1 MiB read)"
"$FIO" --name=warm --ioengine=nbd --uri="${URI[ubcache]}" --rw=read --bs=1m --iodepth=8 --size="$ws_bytes" \
  --output-format=terse >"$raw/warm.out" 2>&1 || { cat "$raw/warm.out" >&2; die "warm-up failed"; }
# The cache writes of the warm-up finish after the reads are answered.
sleep 1

common=(--rw=randread --bs=4k --time_based --runtime="$SECONDS_PER" --randrepeat=0 --norandommap
        --lat_percentiles=1 --percentile_list=50:99:99.9 --output-format=json)
run_one() {  # run_one CONFIG REPEAT; CONFIG ending in "32" runs at QD32
  local c=$1 r=$2 tag="$1-$2" s=${1%32} qd=1 args=()
  [[ $s == "$c" ]] || qd=32
  case "$s" in
    ubcache) args=(--ioengine=nbd --uri="${URI[ubcache]}" --offset=0 --size="$ws_bytes") ;;
    raw) if ((qd == 1)); then args=(--ioengine=io_uring --direct=1 --filename="$CACHE" --offset="$half" --size="$ws_bytes")
         else args=(--ioengine=io_uring --direct=1 --filename="$EXPORT" --size="$ws_bytes"); fi ;;
    nbdkit|qemu-nbd) args=(--ioengine=nbd --uri="${URI[$s]}" --offset="$half" --size="$ws_bytes") ;;
    null|file) args=(--ioengine=nbd --uri="${URI[$s]}" --offset=0 --size="$ws_bytes") ;;
  esac
  [[ $s == raw ]] || running "$s" || return 0
  bench_progress "repeat $r/$REPEAT: $c, 4 KiB randread QD$qd, ${SECONDS_PER} s"
  echo "$FIO --name=$tag --iodepth=$qd ${common[*]} ${args[*]}" >"$raw/fio-$tag.cmd"
  if ! measured "$tag" "${PID[$s]:-}" "$FIO" --name="$tag" --iodepth="$qd" "${common[@]}" "${args[@]}" \
      --output="$raw/fio-$tag.json" >"$raw/fio-$tag.err" 2>&1; then
    echo "latency: fio $tag failed:" >&2; cat "$raw/fio-$tag.err" >&2
    failures=$((failures + 1))
  fi
}
# run_rotated CONFIG...: REPEAT rounds, each driving every CONFIG once, the
# order rotated by one per round.
run_rotated() {
  local -a cs=("$@")
  local k=$# r i
  for ((r = 1; r <= REPEAT; r++)); do
    for ((i = 0; i < k; i++)); do run_one "${cs[$(( (i + r - 1) % k ))]}" "$r"; done
  done
}
# QD1 first (the latency rows), then QD32. The cache-hit counters cover the
# QD1 ubcache runs only.
configs=(ubcache raw nbdkit qemu-nbd null file)
configs32=(ubcache32 raw32 file32 null32)
"$UBCACHE" ctl --control "$CTL" --json show >"$raw/show-0.json" 2>"$raw/show-0.err" || failures=$((failures + 1))
run_rotated "${configs[@]}"
"$UBCACHE" ctl --control "$CTL" --json show >"$raw/show-1.json" 2>"$raw/show-1.err" || failures=$((failures + 1))
run_rotated "${configs32[@]}"
for s in ubcache nbdkit qemu-nbd null file; do running "$s" || true; done
for s in ubcache nbdkit qemu-nbd null file; do stop_server "$s"; done

versions="$("$FIO" --version); $("$NBDKIT" --version 2>&1 | head -1); $("$QEMU_NBD" --version | head -1)"
PYTHONPATH="$bench" "$PYTHON" - "$raw" "$SUITE_DIR/result.json" "$REPEAT" "$SECONDS_PER" "$ws_bytes" "$cache_bytes" \
  "$backing_bytes" "$half" "$versions" "${configs32[*]}" "${configs[@]}" <<'PY' || failures=$((failures + 1))
import json, statistics, sys
from benchlib import load, cpu_of

raw, dst, repeat, seconds, ws, cache, backing, half, versions, configs32, *configs = sys.argv[1:]
configs32 = configs32.split()
repeat = int(repeat)
bad = 0
PCT = {"p50_us": "50.000000", "p99_us": "99.000000", "p99.9_us": "99.900000"}

def one(c, r):
    global bad
    tag = f"{c}-{r}"
    j = load(f"{raw}/fio-{tag}.json", "latency")
    if not j or not j.get("jobs") or j["jobs"][0].get("error"):
        bad += 1
        return None
    job = j["jobs"][0]
    d = job["read"]
    lat = d.get("lat_ns", {}).get("percentile") or d["clat_ns"].get("percentile", {})
    run = {k: lat.get(q, 0) / 1e3 for k, q in PCT.items()}
    run.update({"iops": d["iops"], "ios": d["total_ios"], "mean_us": d.get("lat_ns", {}).get("mean", 0) / 1e3,
                "fio_cpu_pct": (job.get("usr_cpu") or 0) + (job.get("sys_cpu") or 0)})
    run.update(cpu_of(raw, tag, server=not c.startswith("raw")))
    if run.get("server_cpu_pct") is not None and run.get("wall_s") and d["total_ios"]:
        run["server_cpu_us_per_io"] = run["server_cpu_pct"] / 100 * run["wall_s"] / d["total_ios"] * 1e6
    try:
        run["command"] = open(f"{raw}/fio-{tag}.cmd").read().strip()
    except OSError:
        pass
    return run

def cmd(name):
    try:
        return open(f"{raw}/{name}.cmd").read().strip()
    except OSError:
        return None

servers = {}
for c in configs + configs32:
    runs = [one(c, r) for r in range(1, repeat + 1)]
    ok = [x for x in runs if x]
    med = {k: statistics.median(x[k] for x in ok) if ok else None for k in (*PCT, "iops", "mean_us")}
    rng = {k: [min(x[k] for x in ok), max(x[k] for x in ok)] if ok else None for k in (*PCT, "iops")}
    servers[c] = {"server": cmd(c.removesuffix("32")) if not c.startswith("raw") else None, "runs": runs, "median": med, "range": rng}

# ubcache's p50 over each peer's, per repeat (both measured in the same repeat).
ratios = {}
for c in configs[1:]:
    per = {}
    for k in PCT:
        v = [a[k] / b[k] for a, b in zip(servers["ubcache"]["runs"], servers[c]["runs"]) if a and b and b[k]]
        per[k] = {"per_repeat": v, "median": statistics.median(v) if v else None,
                  "range": [min(v), max(v)] if v else None}
    ratios[c] = per

hits = None
a, b = load(f"{raw}/show-0.json", "latency"), load(f"{raw}/show-1.json", "latency")
if a and b:
    dh = b.get("stats_total/cache_hits", 0) - a.get("stats_total/cache_hits", 0)
    dm = b.get("stats_total/cache_misses", 0) - a.get("stats_total/cache_misses", 0)
    reads = sum(x["ios"] for x in servers["ubcache"]["runs"] if x)
    hits = {"hits": dh, "misses": dm, "fio_reads": reads, "hit_pct": 100.0 * dh / (dh + dm) if dh + dm else None}
else:
    bad += 1

doc = {"config": {"repeat": repeat, "seconds": int(seconds), "ws_bytes": int(ws), "cache_bytes": int(cache),
                  "backing_bytes": int(backing), "peer_offset": int(half), "versions": versions,
                  "order": "every repeat drives each configuration in turn, rotated by one per repeat",
                  "fio": "--rw=randread --bs=4k --iodepth=1 --randrepeat=0 --norandommap --lat_percentiles=1",
                  "fio_qd32": "the same with --iodepth=32"},
       "servers": {c: servers[c] for c in configs},
       "qd32": {c.removesuffix("32"): servers[c] for c in configs32}, "ratios_ubcache_over": ratios, "ubcache_hits": hits}
json.dump(doc, open(dst, "w"), indent=2)
sys.exit(1 if bad else 0)
PY
bench_finish
