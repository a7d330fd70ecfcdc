#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# probe_vs_fio.sh — `ubcache probe` next to fio, same file, same parameters.
#
# Answers "does ubcache probe (one thread, one io_uring, O_DIRECT) get what
# the device can do?" by running each probe workload with `ubcache probe`
# and then with fio (io_uring, direct, one job, same bs/iodepth/rw/runtime),
# back to back, so machine noise hits both alike. Also checks the SAS model
# promise of DESIGN.md §7 on sas:mem:1G. Run with --help for the options.
#
# Benchmarks are not tests: the exit status is non-zero only when a tool
# fails (probe/fio error, unparsable output), never for a slow number.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
BENCH=probe_vs_fio

FILE=/var/tmp/ubcache-bench/probe_vs_fio.img
SIZE=2G
SECONDS_PER=5
REPEAT=1
OUT="$repo/bench/results"
UBCACHE="$repo/build/ubcache"
FIO=${FIO:-fio}
PYTHON=${PYTHON:-python3}
WORKLOADS="randread_4k_qd1,randread_4k_qd32,randwrite_4k_qd1,randwrite_4k_qd32,seqread_1m_qd4,seqwrite_1m_qd4"
MODEL_CHECK=1
FILL=1
GOAL=0.8

usage() {
  cat <<EOF
Usage: bench/probe_vs_fio.sh [options]

Runs every \`ubcache probe\` workload and the equivalent fio job on the same
file, interleaved (ubcache, then fio, per workload), and writes
  OUT/probe_vs_fio-<timestamp>.json   all runs, medians, ratios, model check
  OUT/probe_vs_fio-<timestamp>.md     the tables printed at the end
Throughput is IOPS for 4 KiB workloads and MB/s (1e6 B/s) for 1 MiB ones;
latency is fio's total latency (submit to completion, --lat_percentiles=1)
against the probe's (Submit() to callback). Ratio = ubcache / fio; the goal
is >= $GOAL on every workload. Then checks the SAS model promise on
sas:mem:1G (randread QD1 120-220 IOPS, seqread 140-220 MB/s): PASS/FAIL.

The test file is (re)created and filled with real data (fio sequential
write) before the runs, so reads hit allocated blocks. The write workloads
overwrite it. Block devices are refused.

Options:
  --file PATH      test file (default: $FILE)
  --size SIZE      test file size, fio/dd syntax: 512M, 2G, ... (default: $SIZE)
  --seconds N      seconds per workload per tool (default: $SECONDS_PER)
  --repeat N       run each ubcache/fio pair N times; report medians (default: $REPEAT)
  --out DIR        results directory (default: bench/results)
  --only LIST      comma-separated subset of: $WORKLOADS
  --ubcache PATH   ubcache binary (default: build/ubcache)
  --no-fill        reuse an existing file of the right size as is
  --no-model       skip the sas:mem:1G model check
  -h, --help       this text

Environment: FIO, PYTHON override the fio and python3 commands.
Needs: fio (Debian package), python3 (stdlib only), a built ubcache.
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --file) FILE=${2:?--file needs a path}; shift 2 ;;
    --size) SIZE=${2:?--size needs a size}; shift 2 ;;
    --seconds) SECONDS_PER=${2:?--seconds needs N}; shift 2 ;;
    --repeat) REPEAT=${2:?--repeat needs N}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --only) WORKLOADS=${2:?--only needs a list}; shift 2 ;;
    --ubcache) UBCACHE=${2:?--ubcache needs a path}; shift 2 ;;
    --no-fill) FILL=0; shift ;;
    --no-model) MODEL_CHECK=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "probe_vs_fio: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || die "--repeat: expected a positive integer"
[[ $SECONDS_PER =~ ^[1-9][0-9]*$ ]] || die "--seconds: expected a positive integer (fio --runtime)"
[[ -x $UBCACHE ]] || die "$UBCACHE not found; build first: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2"
command -v "$FIO" >/dev/null || die "fio not found (scripts/install-deps installs it)"
command -v "$PYTHON" >/dev/null || die "python3 not found"
[[ -b $FILE ]] && die "$FILE is a block device; this script overwrites its file, give a regular file"

# Workload name -> fio rw, bs, iodepth.
fio_params() {
  case "$1" in
    randread_4k_qd1) echo "randread 4k 1" ;;
    randread_4k_qd32) echo "randread 4k 32" ;;
    randwrite_4k_qd1) echo "randwrite 4k 1" ;;
    randwrite_4k_qd32) echo "randwrite 4k 32" ;;
    seqread_1m_qd4) echo "read 1m 4" ;;
    seqwrite_1m_qd4) echo "write 1m 4" ;;
    *) return 1 ;;
  esac
}
IFS=, read -r -a wl <<<"$WORKLOADS"
for w in "${wl[@]}"; do fio_params "$w" >/dev/null || die "unknown workload '$w'"; done

size_bytes=$(to_bytes "$SIZE") || die "--size: cannot parse '$SIZE'"

stamp=$(date +%Y%m%d-%H%M%S)
started=$(date "+%Y-%m-%d %H:%M:%S %z")
mkdir -p "$OUT" "$(dirname "$FILE")"
bench_setup probe_vs_fio

# 1. The test file, filled with real data (unwritten extents read back as
# zeros without touching the disk and would flatter both tools).
fill_file "$FILE" "$size_bytes"

# 2. Interleaved runs: repeat r, workload w: ubcache, then fio.
for ((r = 1; r <= REPEAT; r++)); do
  for w in "${wl[@]}"; do
    read -r rw bs qd <<<"$(fio_params "$w")"
    echo "== [$r/$REPEAT] $w: ubcache probe" >&2
    if ! "$UBCACHE" probe "$FILE" --json --seconds "$SECONDS_PER" --only "$w" \
        >"$raw/ubcache-$w-$r.json" 2>"$raw/ubcache-$w-$r.err"; then
      echo "probe_vs_fio: ubcache probe $w failed:" >&2; cat "$raw/ubcache-$w-$r.err" >&2
      failures=$((failures + 1))
    fi
    echo "== [$r/$REPEAT] $w: fio --rw=$rw --bs=$bs --iodepth=$qd" >&2
    if ! "$FIO" --name="$w" --filename="$FILE" --size="$size_bytes" --rw="$rw" --bs="$bs" \
        --iodepth="$qd" --numjobs=1 --ioengine=io_uring --direct=1 \
        --runtime="$SECONDS_PER" --time_based --randrepeat=1 --norandommap \
        --lat_percentiles=1 --output-format=json --output="$raw/fio-$w-$r.json" \
        >"$raw/fio-$w-$r.err" 2>&1; then
      echo "probe_vs_fio: fio $w failed:" >&2; cat "$raw/fio-$w-$r.err" >&2
      failures=$((failures + 1))
    fi
  done
done

# 4. The SAS model promise.
if [[ $MODEL_CHECK == 1 ]]; then
  echo "== model check: ubcache probe sas:mem:1G" >&2
  if ! "$UBCACHE" probe sas:mem:1G --json --seconds "$SECONDS_PER" \
      --only randread_4k_qd1,seqread_1m_qd4 >"$raw/model.json" 2>"$raw/model.err"; then
    echo "probe_vs_fio: ubcache probe sas:mem:1G failed:" >&2; cat "$raw/model.err" >&2
    failures=$((failures + 1))
  fi
fi

# 3 + 5. Medians, ratios, JSON + Markdown, table on stdout.
base="$OUT/probe_vs_fio-$stamp"
cmdline="bench/probe_vs_fio.sh --ubcache $UBCACHE --file $FILE --size $SIZE --seconds $SECONDS_PER --repeat $REPEAT --only $WORKLOADS"
[[ $MODEL_CHECK == 0 ]] && cmdline+=" --no-model"
git_rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
PYTHONPATH="$here" "$PYTHON" - "$raw" "$base" "$WORKLOADS" "$REPEAT" "$SECONDS_PER" "$FILE" "$size_bytes" \
  "$GOAL" "$MODEL_CHECK" "$cmdline" "$git_rev" "$("$FIO" --version)" "$started" <<'EOF' || failures=$((failures + 1))
import json, os, platform, statistics, sys, time

(raw, base, workloads, repeat, seconds, path, size, goal, model_check, cmdline, git_rev,
 fio_version, started) = sys.argv[1:14]
workloads, repeat, goal = workloads.split(","), int(repeat), float(goal)
bad = 0

from benchlib import load as _load, write_results

def load(p):
    return _load(p, "probe_vs_fio")

def ub_run(w, r):
    j = load(f"{raw}/ubcache-{w}-{r}.json")
    res = [x for x in (j or {}).get("results", []) if x.get("name") == w]
    if not res:
        return None
    x = res[0]
    return {"iops": x["iops"], "mbps": x["mbps"], "p50_us": x["lat_us"]["p50"],
            "p99_us": x["lat_us"]["p99"], "max_us": x["lat_us"]["max"], "errors": x["errors"]}

def fio_run(w, r):
    j = load(f"{raw}/fio-{w}-{r}.json")
    if not j or not j.get("jobs"):
        return None
    job = j["jobs"][0]
    d = job["read" if "read" in w else "write"]
    lat = d["lat_ns"]
    pct = lat.get("percentile", {})
    return {"iops": d["iops"], "mbps": d["bw_bytes"] / 1e6,
            "p50_us": pct.get("50.000000", 0) / 1e3, "p99_us": pct.get("99.000000", 0) / 1e3,
            "max_us": lat["max"] / 1e3, "errors": job.get("error", 0),
            "usr_cpu": job.get("usr_cpu"), "sys_cpu": job.get("sys_cpu")}

def median(runs, k):
    v = [x[k] for x in runs if x]
    return statistics.median(v) if v else None

rows = []
for w in workloads:
    ub = [ub_run(w, r) for r in range(1, repeat + 1)]
    fi = [fio_run(w, r) for r in range(1, repeat + 1)]
    if not all(ub) or not all(fi):
        bad += 1
    metric = "mbps" if "_1m_" in w else "iops"
    row = {"workload": w, "metric": metric, "ubcache_runs": ub, "fio_runs": fi}
    for k in ("iops", "mbps", "p50_us", "p99_us", "max_us"):
        row[f"ubcache_{k}"] = median(ub, k)
        row[f"fio_{k}"] = median(fi, k)
    u, f = row[f"ubcache_{metric}"], row[f"fio_{metric}"]
    row["ratio"] = u / f if u is not None and f else None
    row["meets_goal"] = row["ratio"] is not None and row["ratio"] >= goal
    rows.append(row)

model = None
if model_check == "1":
    j = load(f"{raw}/model.json")
    res = {x["name"]: x for x in (j or {}).get("results", [])}
    checks = [("randread_4k_qd1", "iops", 120, 220, "IOPS"),
              ("seqread_1m_qd4", "mbps", 140, 220, "MB/s")]
    model = {"spec": "sas:mem:1G", "checks": []}
    for name, k, lo, hi, unit in checks:
        v = res.get(name, {}).get(k)
        if v is None:
            bad += 1
        model["checks"].append({"workload": name, "metric": k, "value": v, "min": lo, "max": hi,
                                "unit": unit, "pass": v is not None and lo <= v <= hi,
                                "lat_us": res.get(name, {}).get("lat_us")})

def fmt(v, metric=None):
    if v is None:
        return "—"
    if metric == "mbps":
        return f"{v:.1f} MB/s"
    if metric == "iops":
        return f"{v:.0f} IOPS"
    return f"{v:.1f}"

med = f"median of {repeat}" if repeat > 1 else "1 run"
lines = [f"# ubcache probe vs fio — {started}", "",
         f"`{cmdline}`", "",
         f"File {path} ({int(size) >> 20} MiB), {seconds} s per workload per tool, {med}; "
         f"{platform.node()}, Linux {platform.release()}, {fio_version}, ubcache {git_rev}.", "",
         f"| workload | fio | ubcache probe | ratio (ubcache/fio) |",
         "|---|---:|---:|---:|"]
for r in rows:
    ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}" + ("" if r["meets_goal"] else " ⚠ < %.1f" % goal)
    lines.append(f"| {r['workload']} | {fmt(r['fio_' + r['metric']], r['metric'])} | "
                 f"{fmt(r['ubcache_' + r['metric']], r['metric'])} | {ratio} |")
lines += ["", "Latency, µs (fio: total latency, submit to completion; probe: Submit() to callback):", "",
          "| workload | fio p50 | ubcache p50 | ratio p50 | fio p99 | ubcache p99 | ratio p99 |",
          "|---|---:|---:|---:|---:|---:|---:|"]
def rat(a, b):
    return f"{a / b:.2f}" if a is not None and b else "—"
for r in rows:
    lines.append(f"| {r['workload']} | {fmt(r['fio_p50_us'])} | {fmt(r['ubcache_p50_us'])} | "
                 f"{rat(r['ubcache_p50_us'], r['fio_p50_us'])} | {fmt(r['fio_p99_us'])} | "
                 f"{fmt(r['ubcache_p99_us'])} | {rat(r['ubcache_p99_us'], r['fio_p99_us'])} |")
below = [r["workload"] for r in rows if not r["meets_goal"]]
lines += ["", f"Goal ubcache >= {goal}x fio: " +
          ("met on every workload" if not below else "NOT met on " + ", ".join(below))]
if model:
    lines += ["", "Model check (`ubcache probe sas:mem:1G`, DESIGN.md §7):", ""]
    for c in model["checks"]:
        v = "—" if c["value"] is None else f"{c['value']:.1f}"
        lines.append(f"    {'PASS' if c['pass'] else 'FAIL'} {c['workload']}: {v} {c['unit']} "
                     f"(expected {c['min']}–{c['max']})")
md = "\n".join(lines) + "\n"

doc = {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": cmdline, "file": path,
       "size_bytes": int(size), "seconds": int(seconds), "repeat": repeat, "goal_ratio": goal,
       "host": platform.node(), "kernel": platform.release(), "fio_version": fio_version,
       "ubcache_rev": git_rev, "workloads": rows, "model_check": model}
write_results(base, doc, md)
sys.exit(1 if bad else 0)
EOF

bench_finish
