#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cache_bench.sh — what the cache costs and what it buys, one run, one machine.
#
# Answers issue 4's bench item, through fio's nbd engine (libnbd):
#  (1) index cost: 4 KiB randread QD32 over a working set that is resident in
#      the cache, against ubcache's passthrough of an identical cache file:
#        (a) ubcache serve --backing CACHE_A                        (passthrough)
#        (b) ubcache serve --cache CACHE_B --backing BACKING --sequential-cutoff 0
#            after one sequential warm-up pass over the working set
#      CACHE_A and CACHE_B are separate but identical filled files on the same
#      disk, so (a) and (b) read the same kind of media; a and b are
#      interleaved per repeat (order swapped each repeat). Target: b/a >= 0.95,
#      with the measured passes >= 99 % hits (from b's SIGTERM stats line).
#  (2) warm vs cold over a modelled 10k rpm SAS spindle (--backing sas:BACKING):
#      one 4 KiB randread QD16 pass over the working set (fixed seed,
#      io_size = working set, so every block is read exactly once) on a freshly
#      formatted cache, then the identical pass again. Target: warm/cold >= 50.
# Server CPU (/proc/PID/stat) and machine CPU (/proc/stat) are recorded per run.
# Run with --help for the options.
#
# Benchmarks are not tests: the exit status is non-zero only when a tool
# fails (server does not start or dies, fio error, unparsable output), never
# for a slow number.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
BENCH=cache_bench

DIR=/var/tmp/ubcache-bench
CACHE_SIZE=2G
BACKING_SIZE=1G
WS=512M
WS2=64M
SECONDS_PER=10
REPEAT=1
SEED=7
OUT="$repo/bench/results"
UBCACHE="$repo/build/ubcache"
THREADS=0
CONG=""
SECTIONS="1,2"
FILL=1
FIO=${FIO:-fio}
PYTHON=${PYTHON:-python3}

usage() {
  cat <<EOF
Usage: bench/cache_bench.sh [options]

Measures with fio's nbd engine (nbd+unix:///?socket=...), in one run:
  (1) index cost, 4 KiB randread QD32 over a resident working set (--ws):
      a: ubcache serve --backing CACHE_A                       (passthrough)
      b: ubcache serve --cache CACHE_B --backing BACKING --sequential-cutoff 0
         (freshly formatted, warmed by one sequential 1 MiB read of the set)
      interleaved per repeat; target b/a >= 0.95 with >= 99 % hits.
  (2) cold vs warm over sas:BACKING: two identical 4 KiB randread QD16 passes
      over --ws2 (fixed seed, io_size = working set) on a freshly formatted
      cache; target warm/cold IOPS >= 50.
Writes
  OUT/cache_bench-<timestamp>.json   every run (IOPS, latency, CPU), stats lines, medians
  OUT/cache_bench-<timestamp>.md     the tables and PASS/MISS lines printed at the end

Options:
  --dir DIR          where the device files go (default: $DIR)
  --cache-size SIZE  size of each cache file (default: $CACHE_SIZE)
  --backing-size SIZE size of the backing file (default: $BACKING_SIZE)
  --ws SIZE          working set of (1) (default: $WS; must fit the cache)
  --ws2 SIZE         working set of (2) (default: $WS2)
  --seconds N        seconds per measured pass of (1) (default: $SECONDS_PER)
  --repeat N         repeats; tables show medians (default: $REPEAT)
  --seed N           fio randseed of (2) (default: $SEED)
  --sections LIST    1,2 or one of them (default: $SECTIONS)
  --threads N        ubcache serve --threads (default: $THREADS = server default)
  --congested-read-threshold-us US
                     pass this to the cached servers (default: server default)
  --out DIR          results directory (default: bench/results)
  --ubcache PATH     ubcache binary (default: build/ubcache)
  --no-fill          reuse existing files of the right size as they are
  -h, --help         this text

Environment: FIO, PYTHON override the commands. Needs fio (nbd engine), python3.
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR=${2:?--dir needs a directory}; shift 2 ;;
    --cache-size) CACHE_SIZE=${2:?--cache-size needs a size}; shift 2 ;;
    --backing-size) BACKING_SIZE=${2:?--backing-size needs a size}; shift 2 ;;
    --ws) WS=${2:?--ws needs a size}; shift 2 ;;
    --ws2) WS2=${2:?--ws2 needs a size}; shift 2 ;;
    --seconds) SECONDS_PER=${2:?--seconds needs N}; shift 2 ;;
    --repeat) REPEAT=${2:?--repeat needs N}; shift 2 ;;
    --seed) SEED=${2:?--seed needs N}; shift 2 ;;
    --sections) SECTIONS=${2:?--sections needs a list}; shift 2 ;;
    --threads) THREADS=${2:?--threads needs N}; shift 2 ;;
    --congested-read-threshold-us) CONG=${2:?needs US}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --ubcache) UBCACHE=${2:?--ubcache needs a path}; shift 2 ;;
    --no-fill) FILL=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cache_bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || die "--repeat: expected a positive integer"
[[ $SECONDS_PER =~ ^[1-9][0-9]*$ ]] || die "--seconds: expected a positive integer"
[[ $SEED =~ ^[0-9]+$ ]] || die "--seed: expected an integer"
[[ $THREADS =~ ^[0-9]+$ ]] || die "--threads: expected an integer"
[[ -z $CONG || $CONG =~ ^[0-9]+$ ]] || die "--congested-read-threshold-us: expected an integer"
[[ -x $UBCACHE ]] || die "$UBCACHE not found; build first: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2"
for t in "$FIO" "$PYTHON"; do command -v "$t" >/dev/null || die "$t not found"; done
"$FIO" --enghelp 2>/dev/null | grep -qw nbd || die "this fio has no nbd engine"
[[ $DIR == /tmp || $DIR == /tmp/* ]] && echo "cache_bench: warning: $DIR is under /tmp, which may be tmpfs (no O_DIRECT)" >&2
want1=0; want2=0
IFS=, read -r -a secs <<<"$SECTIONS"
for s in "${secs[@]}"; do
  case "$s" in 1) want1=1 ;; 2) want2=1 ;; *) die "--sections: unknown section '$s'" ;; esac
done

cache_bytes=$(to_bytes "$CACHE_SIZE") || die "--cache-size: cannot parse '$CACHE_SIZE'"
backing_bytes=$(to_bytes "$BACKING_SIZE") || die "--backing-size: cannot parse '$BACKING_SIZE'"
ws_bytes=$(to_bytes "$WS") || die "--ws: cannot parse '$WS'"
ws2_bytes=$(to_bytes "$WS2") || die "--ws2: cannot parse '$WS2'"
# The backing file's data starts at its superblock's data_offset (8 KiB), so
# leave room; the working set must be well inside the cache's data buckets.
(( ws_bytes + (1 << 20) <= backing_bytes && ws2_bytes + (1 << 20) <= backing_bytes )) ||
  die "--backing-size must exceed --ws and --ws2 by at least 1 MiB"
(( ws_bytes * 10 <= cache_bytes * 9 )) || die "--ws must be at most 90 % of --cache-size (it has to stay resident)"
(( ws_bytes <= cache_bytes )) || die "--ws larger than the passthrough file"

CACHE_A="$DIR/cache_bench-cache-a.img"
CACHE_B="$DIR/cache_bench-cache-b.img"
BACKING="$DIR/cache_bench-backing.img"

stamp=$(date +%Y%m%d-%H%M%S)
started=$(date "+%Y-%m-%d %H:%M:%S %z")
mkdir -p "$OUT" "$DIR"
bench_setup cache_bench

# format_set: a fresh cache set on CACHE_B + BACKING, so the next server is
# cold whatever a restart keeps (bucket contents stay: no --discard).
format_set() {
  "$UBCACHE" format --cache "$CACHE_B" --backing "$BACKING" --force >"$raw/format.log" 2>&1 || {
    echo "cache_bench: ubcache format failed:" >&2; cat "$raw/format.log" >&2; return 1; }
}

# run_fio SERVER TAG fio-args...: one fio job through SERVER's socket.
run_fio() {
  local s=$1 tag=$2; shift 2
  running "$s" || return 0
  echo "== $tag ($s)" >&2
  if ! measured "$tag" "${PID[$s]}" "$FIO" --name="$tag" --ioengine=nbd --uri="${URI[$s]}" "$@" \
      --output-format=json --output="$raw/fio-$tag.json" >"$raw/fio-$tag.err" 2>&1; then
    echo "cache_bench: fio $tag failed:" >&2; cat "$raw/fio-$tag.err" >&2
    failures=$((failures + 1))
  fi
}

# serve NAME ubcache-serve-args...
serve() {
  local name=$1; shift
  start_server "$name" "$UBCACHE" serve "$@" --nbd "unix:$raw/$name.sock" --threads "$THREADS"
}

cong_args=()
[[ -n $CONG ]] && cong_args=(--congested-read-threshold-us "$CONG")

fill_file "$BACKING" "$backing_bytes"
fill_file "$CACHE_B" "$cache_bytes"
[[ $want1 == 1 ]] && fill_file "$CACHE_A" "$cache_bytes"

# (1) index cost.
randread32=(--rw=randread --bs=4k --iodepth=32 --size="$ws_bytes" --runtime="$SECONDS_PER" --time_based
            --randrepeat=1 --norandommap)
warmup=(--rw=read --bs=1m --iodepth=8 --size="$ws_bytes")
if [[ $want1 == 1 ]]; then
  format_set || die "format failed"
  serve a --backing "file:$CACHE_A" || die "ubcache serve (a) failed to start"
  serve b --cache "$CACHE_B" --backing "$BACKING" --sequential-cutoff 0 "${cong_args[@]}" ||
    die "ubcache serve (b) failed to start"
  # The same sequential read over both: b makes the set resident; a gets the
  # same treatment so any host-side caching of the image files is alike.
  run_fio b warmup-b "${warmup[@]}"
  run_fio a warmup-a "${warmup[@]}"
  for ((r = 1; r <= REPEAT; r++)); do
    order=(a b); (( r % 2 == 0 )) && order=(b a)
    for s in "${order[@]}"; do
      run_fio "$s" "s1-$s-$r" "${randread32[@]}"
    done
  done
  stop_server b; stop_server a
  cp "$raw/b.log" "$raw/stats-s1.log"
fi

# (2) cold vs warm over sas:, once per repeat, each on a freshly formatted cache.
pass2=(--rw=randread --bs=4k --iodepth=16 --size="$ws2_bytes" --io_size="$ws2_bytes"
       --randrepeat=1 --randseed="$SEED")
if [[ $want2 == 1 ]]; then
  for ((r = 1; r <= REPEAT; r++)); do
    format_set || die "format failed"
    serve "c$r" --cache "$CACHE_B" --backing "sas:$BACKING" "${cong_args[@]}" ||
      die "ubcache serve (sas) failed to start"
    run_fio "c$r" "s2-cold-$r" "${pass2[@]}"
    run_fio "c$r" "s2-warm-$r" "${pass2[@]}"
    stop_server "c$r"
    cp "$raw/c$r.log" "$raw/stats-s2-$r.log"
  done
fi

# Medians, ratios, targets; JSON + Markdown; tables on stdout.
base="$OUT/cache_bench-$stamp"
cmdline="bench/cache_bench.sh --ubcache $UBCACHE --dir $DIR --cache-size $CACHE_SIZE --backing-size $BACKING_SIZE --ws $WS --ws2 $WS2 --seconds $SECONDS_PER --repeat $REPEAT --seed $SEED --sections $SECTIONS --threads $THREADS${CONG:+ --congested-read-threshold-us $CONG}"
git_rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
versions="$("$FIO" --version)"
PYTHONPATH="$here" "$PYTHON" - "$raw" "$base" "$REPEAT" "$SECONDS_PER" "$DIR" "$cache_bytes" "$backing_bytes" "$ws_bytes" \
  "$ws2_bytes" "$SECTIONS" "$cmdline" "$git_rev" "$versions" "$started" "$THREADS" "$SEED" <<'EOF' || failures=$((failures + 1))
import json, os, platform, re, statistics, sys, time

(raw, base, repeat, seconds, ddir, cache_size, backing_size, ws, ws2, sections, cmdline, git_rev,
 versions, started, threads, seed) = sys.argv[1:17]
repeat, ws, ws2 = int(repeat), int(ws), int(ws2)
sections = sections.split(",")
bad = 0

from benchlib import load as _load, cpu_of, machine_lines, write_results

def load(p):
    return _load(p, "cache_bench")

def one_run(tag):
    global bad
    j = load(f"{raw}/fio-{tag}.json")
    if not j or not j.get("jobs") or j["jobs"][0].get("error"):
        bad += 1
        return None
    job = j["jobs"][0]
    d = job["read"]
    pct = d["clat_ns"].get("percentile", {})
    run = {"iops": d["iops"], "ios": d["total_ios"], "runtime_s": d["runtime"] / 1e3,
           "p50_us": pct.get("50.000000", 0) / 1e3, "p99_us": pct.get("99.000000", 0) / 1e3,
           "fio_cpu_pct": (job.get("usr_cpu") or 0) + (job.get("sys_cpu") or 0)}
    run.update(cpu_of(raw, tag))
    return run

STATS = re.compile(r"export '([^']*)': cache_hits (\d+) cache_misses (\d+) cache_hit_ratio (\d+)% "
                   r"cache_bypass_hits (\d+) cache_bypass_misses (\d+) cache_miss_collisions (\d+) "
                   r"bypassed ([0-9.]+ ?[KMGTPE]?i?B)")
def stats(name):
    global bad
    try:
        m = STATS.search(open(f"{raw}/{name}").read())
    except OSError:
        m = None
    if not m:
        print(f"cache_bench: no stats line in {name}", file=sys.stderr)
        bad += 1
        return None
    h, mi, ratio, bh, bm, coll = (int(x) for x in m.groups()[1:7])
    return {"cache_hits": h, "cache_misses": mi, "cache_hit_ratio_pct": ratio,
            "cache_bypass_hits": bh, "cache_bypass_misses": bm, "cache_miss_collisions": coll,
            "bypassed": m.group(8)}

def med(runs, k):
    v = [x[k] for x in runs if x and x.get(k) is not None]
    return statistics.median(v) if v else None

def cmd(name):
    try:
        return open(f"{raw}/{name}.cmd").read().strip()
    except OSError:
        return None

doc = {"started": started, "command": cmdline, "dir": ddir, "cache_size_bytes": int(cache_size),
       "backing_size_bytes": int(backing_size), "ws_bytes": ws, "ws2_bytes": ws2, "seconds": int(seconds),
       "repeat": repeat, "seed": int(seed), "host": platform.node(), "kernel": platform.release(),
       "cpus": os.cpu_count(), "versions": versions, "ubcache_rev": git_rev, "ubcache_threads": int(threads)}
targets = []
def target(name, value, need, fmtv):
    targets.append({"target": name, "value": value, "need": need, "shown": fmtv(value),
                    "pass": value is not None and value >= need})

def f0(v): return "—" if v is None else f"{v:.0f}"
def f2(v): return "—" if v is None else f"{v:.2f}"
def fp(v): return "—" if v is None else f"{v:.2f} %"

med_txt = f"median of {repeat}" if repeat > 1 else "1 run"
lines = [f"# ubcache cache bench — {started}", "", f"`{cmdline}`", "",
         f"fio nbd engine (libnbd, one connection), {platform.node()}, Linux {platform.release()}, "
         f"{os.cpu_count()} CPUs; {versions}; ubcache {git_rev} (--threads {threads}); files in {ddir}.", ""]

if "1" in sections:
    wu = one_run("warmup-b"), one_run("warmup-a")
    ra = [one_run(f"s1-a-{r}") for r in range(1, repeat + 1)]
    rb = [one_run(f"s1-b-{r}") for r in range(1, repeat + 1)]
    st = stats("stats-s1.log")
    s1 = {"server_a": cmd("a"), "server_b": cmd("b"), "warmup": {"b": wu[0], "a": wu[1]},
          "a": {"runs": ra}, "b": {"runs": rb}, "stats_b": st}
    for k, runs in (("a", ra), ("b", rb)):
        s1[k].update({x: med(runs, x) for x in ("iops", "p50_us", "p99_us", "server_cpu_pct", "fio_cpu_pct")})
    per = [b["iops"] / a["iops"] if a and b and a["iops"] else None for a, b in zip(ra, rb)]
    s1["ratio_per_repeat"] = per
    ratio = (s1["b"]["iops"] / s1["a"]["iops"]) if s1["a"]["iops"] and s1["b"]["iops"] else None
    s1["ratio"] = ratio
    # The cache was formatted just before b started and the warm-up reads
    # every block of the set once, so the warm-up cannot hit: every hit in
    # the stats line is a measured-pass hit.
    hit_pct = None
    if st and wu[0] and all(rb):
        n_meas = sum(x["ios"] for x in rb)
        n_all = st["cache_hits"] + st["cache_misses"] + st["cache_bypass_hits"] + st["cache_bypass_misses"]
        hit_pct = 100.0 * st["cache_hits"] / n_meas if n_meas else None
        s1["measured_ios"], s1["warmup_ios"], s1["counted_ios"] = n_meas, wu[0]["ios"], n_all
        s1["measured_hit_pct"] = hit_pct
    doc["index_cost"] = s1
    lines += [f"## (1) index cost: 4 KiB randread QD32, {ws >> 20} MiB working set, {seconds} s per pass, {med_txt}", "",
              f"a: `{s1['server_a']}`  ", f"b: `{s1['server_b']}` (warmed by one 1 MiB sequential read of the set)", "",
              "| server | IOPS | p50 µs | p99 µs | server CPU % | fio CPU % |", "|---|---:|---:|---:|---:|---:|"]
    for k, label in (("a", "(a) passthrough of cache file"), ("b", "(b) cached, resident")):
        x = s1[k]
        lines.append(f"| {label} | {f0(x['iops'])} | {f0(x['p50_us'])} | {f0(x['p99_us'])} | "
                     f"{f0(x['server_cpu_pct'])} | {f0(x['fio_cpu_pct'])} |")
    lines += ["", "Per repeat (a, b, b/a): " + "; ".join(
        f"{f0(a and a['iops'])}, {f0(b and b['iops'])}, {f2(p)}" for a, b, p in zip(ra, rb, per)), ""]
    if st:
        lines += [f"b's stats line: hits {st['cache_hits']}, misses {st['cache_misses']} "
                  f"(ratio {st['cache_hit_ratio_pct']} %), bypass hits {st['cache_bypass_hits']}, "
                  f"bypass misses {st['cache_bypass_misses']}, collisions {st['cache_miss_collisions']}, "
                  f"bypassed {st['bypassed']}; warm-up {s1.get('warmup_ios', '—')} requests, "
                  f"measured {s1.get('measured_ios', '—')} requests, counted {s1.get('counted_ios', '—')}; "
                  f"measured-pass hits {fp(hit_pct)}.", ""]
    target("(1) cached/passthrough randread_4k_qd32 >= 0.95", ratio, 0.95, f2)
    target("(1) measured passes are >= 99 % hits", hit_pct, 99.0, fp)

if "2" in sections:
    rows = []
    for r in range(1, repeat + 1):
        c, w, st = one_run(f"s2-cold-{r}"), one_run(f"s2-warm-{r}"), stats(f"stats-s2-{r}.log")
        row = {"cold": c, "warm": w, "stats": st, "server": cmd(f"c{r}"),
               "ratio": w["iops"] / c["iops"] if c and w and c["iops"] else None}
        # The cold pass reads each block once from a freshly formatted cache:
        # it cannot hit, so every hit is a warm-pass hit.
        row["warm_hit_pct"] = 100.0 * st["cache_hits"] / w["ios"] if st and w and w["ios"] else None
        rows.append(row)
    s2 = {"runs": rows,
          "cold_iops": med([x["cold"] for x in rows], "iops"), "warm_iops": med([x["warm"] for x in rows], "iops"),
          "ratio": med(rows, "ratio"), "warm_hit_pct": med(rows, "warm_hit_pct")}
    doc["warm_vs_cold"] = s2
    lines += [f"## (2) cold vs warm over sas: — 4 KiB randread QD16, {ws2 >> 20} MiB working set, "
              f"io_size = working set, randseed {seed}, {med_txt}", "",
              f"`{rows[0]['server'] if rows else ''}` (cache formatted fresh before each repeat)", "",
              "| repeat | cold IOPS | warm IOPS | warm/cold | cold p50 µs | warm p50 µs | cold s | hit ratio (stats line) | warm-pass hits |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, x in enumerate(rows, 1):
        c, w, st = x["cold"] or {}, x["warm"] or {}, x["stats"] or {}
        lines.append(f"| {i} | {f0(c.get('iops'))} | {f0(w.get('iops'))} | {f2(x['ratio'])} | "
                     f"{f0(c.get('p50_us'))} | {f0(w.get('p50_us'))} | {f2(c.get('runtime_s'))} | "
                     f"{st.get('cache_hit_ratio_pct', '—')} % ({st.get('cache_hits', '—')}/"
                     f"{(st.get('cache_hits', 0) + st.get('cache_misses', 0)) or '—'}) | {fp(x['warm_hit_pct'])} |")
    lines.append(f"| median | {f0(s2['cold_iops'])} | {f0(s2['warm_iops'])} | {f2(s2['ratio'])} | | | | | "
                 f"{fp(s2['warm_hit_pct'])} |")
    lines.append("")
    target("(2) warm/cold randread_4k_qd16 over sas: >= 50", s2["ratio"], 50.0, f2)

busy = []
for p in sorted(os.listdir(raw)):
    if p.startswith("stat-"):
        r = one_run(p[5:-4]) if os.path.exists(f"{raw}/fio-{p[5:-4]}.json") else None
        if r and "machine" in r:
            busy.append(r["machine"])
lines += machine_lines(busy)
lines += ["Targets (issue 4):", ""]
for t in targets:
    lines.append(f"    {'PASS' if t['pass'] else 'MISS'} {t['target']}: {t['shown']}")
md = "\n".join(lines) + "\n"
doc["targets"] = targets
doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
write_results(base, doc, md)
sys.exit(1 if bad else 0)
EOF

bench_finish
