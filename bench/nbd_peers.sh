#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nbd_peers.sh — `ubcache serve` against its NBD peers, one run, one machine.
#
# Answers issue 3's bench item: through fio's nbd engine (libnbd), how does
# `ubcache serve` compare with
#   (i)  nbdkit memory                     — both serving RAM (mem:1G / memory 1G)
#   (ii) qemu-nbd --cache=none --aio=io_uring, nbdkit file, and the raw file
#        through fio's io_uring engine     — all on one filled file
# on 4 KiB randread/randwrite QD32 and 1 MiB sequential read/write QD8?
# Servers are started once per run and kept up; for every repeat and every
# workload each server is driven in turn (interleaved, order rotated per
# repeat), so machine noise hits all alike. Server CPU (/proc/PID/stat),
# fio CPU (fio's usr_cpu+sys_cpu) and machine CPU (/proc/stat, incl. steal)
# are recorded per run to tell a client-bound from a server-bound number.
# Run with --help for the options.
#
# Benchmarks are not tests: the exit status is non-zero only when a tool
# fails (server does not start or dies, fio error, unparsable output),
# never for a slow number.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
BENCH=nbd_peers

FILE=/var/tmp/ubcache-bench/nbd_peers.img
SIZE=2G
MEM_SIZE=1G
SECONDS_PER=10
REPEAT=1
OUT="$repo/bench/results"
UBCACHE="$repo/build/ubcache"
THREADS=0
FIO=${FIO:-fio}
PYTHON=${PYTHON:-python3}
NBDKIT=${NBDKIT:-nbdkit}
QEMU_NBD=${QEMU_NBD:-qemu-nbd}
WORKLOADS="randread_4k_qd32,randwrite_4k_qd32,seqread_1m_qd8,seqwrite_1m_qd8"
X2="randread_4k_qd32,randwrite_4k_qd32"
GROUPS_SEL="mem,file"
FILL=1

usage() {
  cat <<EOF
Usage: bench/nbd_peers.sh [options]

Measures with fio's nbd engine (nbd+unix:///?socket=...), in one run:
  group mem:  ubcache serve --backing mem:$MEM_SIZE  vs  nbdkit memory $MEM_SIZE
              (both pre-written in full by one fio sequential write), and
              nbdkit null $MEM_SIZE: a server doing no work, i.e. what the
              fio nbd client itself can reach on this machine
  group file: on one filled file (O_DIRECT where the server has it)
              ubcache serve --backing file:FILE
              qemu-nbd --cache=none --aio=io_uring --format=raw --shared=8 --persistent
              nbdkit file FILE cache=none
              raw: fio --ioengine=io_uring --direct=1 on FILE itself
Workloads: randread_4k_qd32, randwrite_4k_qd32 (IOPS), seqread_1m_qd8,
seqwrite_1m_qd8 (MB/s = 1e6 B/s); each one fio job = one NBD connection.
Workloads in --x2 also run as *_x2: numjobs=2 (two connections, each at the
same iodepth), to see whether one connection is client-bound.
Writes
  OUT/nbd_peers-<timestamp>.json   every run (value, CPU), medians, ratios
  OUT/nbd_peers-<timestamp>.md     the tables and target lines printed at the end
and prints PASS/MISS for issue 3's targets.

Options:
  --file PATH      test file for group file (default: $FILE)
  --size SIZE      its size (default: $SIZE)
  --mem-size SIZE  RAM export size for group mem (default: $MEM_SIZE)
  --seconds N      seconds per workload per server (default: $SECONDS_PER)
  --repeat N       repeats; tables show medians (default: $REPEAT)
  --out DIR        results directory (default: bench/results)
  --only LIST      subset of: $WORKLOADS
  --x2 LIST        workloads also run with 2 connections, or "none" (default: $X2)
  --groups LIST    mem,file or one of them (default: $GROUPS_SEL)
  --threads N      ubcache serve --threads (default: $THREADS = server default)
  --ubcache PATH   ubcache binary (default: build/ubcache)
  --no-fill        reuse an existing file of the right size as is
  -h, --help       this text

Environment: FIO, PYTHON, NBDKIT, QEMU_NBD override the commands.
Needs: fio (with the nbd engine), nbdkit, qemu-utils (qemu-nbd), python3.
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --file) FILE=${2:?--file needs a path}; shift 2 ;;
    --size) SIZE=${2:?--size needs a size}; shift 2 ;;
    --mem-size) MEM_SIZE=${2:?--mem-size needs a size}; shift 2 ;;
    --seconds) SECONDS_PER=${2:?--seconds needs N}; shift 2 ;;
    --repeat) REPEAT=${2:?--repeat needs N}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --only) WORKLOADS=${2:?--only needs a list}; shift 2 ;;
    --x2) X2=${2:?--x2 needs a list}; shift 2 ;;
    --groups) GROUPS_SEL=${2:?--groups needs a list}; shift 2 ;;
    --threads) THREADS=${2:?--threads needs N}; shift 2 ;;
    --ubcache) UBCACHE=${2:?--ubcache needs a path}; shift 2 ;;
    --no-fill) FILL=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "nbd_peers: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || die "--repeat: expected a positive integer"
[[ $SECONDS_PER =~ ^[1-9][0-9]*$ ]] || die "--seconds: expected a positive integer"
[[ $THREADS =~ ^[0-9]+$ ]] || die "--threads: expected an integer"
[[ -x $UBCACHE ]] || die "$UBCACHE not found; build first: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2"
for t in "$FIO" "$PYTHON"; do command -v "$t" >/dev/null || die "$t not found"; done
"$FIO" --enghelp 2>/dev/null | grep -qw nbd || die "this fio has no nbd engine"
[[ -b $FILE ]] && die "$FILE is a block device; this script overwrites its file, give a regular file"
[[ $FILE == /tmp/* ]] && echo "nbd_peers: warning: $FILE is under /tmp, which may be tmpfs (no O_DIRECT)" >&2

# Workload name -> fio rw, bs, iodepth, numjobs.
fio_params() {
  local n=1 w=$1
  [[ $w == *_x2 ]] && { n=2; w=${w%_x2}; }
  case "$w" in
    randread_4k_qd32) echo "randread 4k 32 $n" ;;
    randwrite_4k_qd32) echo "randwrite 4k 32 $n" ;;
    seqread_1m_qd8) echo "read 1m 8 $n" ;;
    seqwrite_1m_qd8) echo "write 1m 8 $n" ;;
    *) return 1 ;;
  esac
}
IFS=, read -r -a base_wl <<<"$WORKLOADS"
wl=()
for w in "${base_wl[@]}"; do fio_params "$w" >/dev/null || die "unknown workload '$w'"; wl+=("$w"); done
if [[ $X2 != none ]]; then
  IFS=, read -r -a x2_wl <<<"$X2"
  for w in "${x2_wl[@]}"; do
    fio_params "$w" >/dev/null || die "--x2: unknown workload '$w'"
    [[ ,$WORKLOADS, == *,$w,* ]] && wl+=("${w}_x2")
  done
fi
IFS=, read -r -a groups <<<"$GROUPS_SEL"
want_mem=0; want_file=0
for g in "${groups[@]}"; do
  case "$g" in mem) want_mem=1 ;; file) want_file=1 ;; *) die "--groups: unknown group '$g'" ;; esac
done
command -v "$NBDKIT" >/dev/null || die "nbdkit not found (apt-get install nbdkit)"
[[ $want_file == 1 ]] && { command -v "$QEMU_NBD" >/dev/null || die "qemu-nbd not found (apt-get install qemu-utils)"; }

size_bytes=$(to_bytes "$SIZE") || die "--size: cannot parse '$SIZE'"
mem_bytes=$(to_bytes "$MEM_SIZE") || die "--mem-size: cannot parse '$MEM_SIZE'"

stamp=$(date +%Y%m%d-%H%M%S)
started=$(date "+%Y-%m-%d %H:%M:%S %z")
mkdir -p "$OUT"
bench_setup nbd_peers

# fill_nbd NAME: one sequential write over the whole export, so reads hit data.
fill_nbd() {
  echo "== filling $1 (one fio sequential write over the export)" >&2
  "$FIO" --name=fill --ioengine=nbd --uri="${URI[$1]}" --rw=write --bs=1m --iodepth=8 \
    --output-format=terse >"$raw/fill-$1.out" 2>&1 || {
    echo "nbd_peers: fill of $1 failed:" >&2; cat "$raw/fill-$1.out" >&2; return 1; }
}

# run_one GROUP SERVER WORKLOAD REPEAT
run_one() {
  local g=$1 s=$2 w=$3 r=$4 rw bs qd nj target
  read -r rw bs qd nj <<<"$(fio_params "$w")"
  local tag="$g-$s-$w-$r"
  local args=(--name="$w" --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs="$nj" --group_reporting
              --runtime="$SECONDS_PER" --time_based --randrepeat=1 --norandommap
              --output-format=json --output="$raw/fio-$tag.json")
  if [[ $nj -gt 1 && $rw != rand* ]]; then
    local span=$mem_bytes
    [[ $g == file ]] && span=$size_bytes
    span=$(( span / nj ))
    args+=(--size="$span" --offset_increment="$span")
  fi
  if [[ $s == raw ]]; then
    args+=(--ioengine=io_uring --direct=1 --filename="$FILE" --size="$size_bytes")
  else
    running "$g-$s" || return 0
    args+=(--ioengine=nbd --uri="${URI[$g-$s]}")
  fi
  echo "== [$r/$REPEAT] $g $w: $s" >&2
  if ! measured "$tag" "${PID[$g-$s]:-}" "$FIO" "${args[@]}" >"$raw/fio-$tag.err" 2>&1; then
    echo "nbd_peers: fio $tag failed:" >&2; cat "$raw/fio-$tag.err" >&2
    failures=$((failures + 1))
  fi
}

# 1. Servers (kept up for the whole run) and data.
mem_servers=(); file_servers=()
if [[ $want_mem == 1 ]]; then
  start_server mem-ubcache "$UBCACHE" serve --backing "mem:$mem_bytes" --nbd "unix:$raw/mem-ubcache.sock" \
    --threads "$THREADS" || die "ubcache serve (mem) failed to start"
  start_server mem-nbdkit "$NBDKIT" -f --exit-with-parent -U "$raw/mem-nbdkit.sock" memory "$mem_bytes" ||
    die "nbdkit memory failed to start"
  # A server that does no work (reads are zeros): how far the fio nbd
  # client itself gets on this machine, to tell a client-bound ratio.
  start_server mem-null "$NBDKIT" -f --exit-with-parent -U "$raw/mem-null.sock" null "$mem_bytes" ||
    die "nbdkit null failed to start"
  mem_servers=(ubcache nbdkit null)
  fill_nbd mem-ubcache || die "fill failed"
  fill_nbd mem-nbdkit || die "fill failed"
fi
if [[ $want_file == 1 ]]; then
  fill_file "$FILE" "$size_bytes"
  start_server file-ubcache "$UBCACHE" serve --backing "file:$FILE" --nbd "unix:$raw/file-ubcache.sock" \
    --threads "$THREADS" || die "ubcache serve (file) failed to start"
  start_server file-qemu-nbd "$QEMU_NBD" --cache=none --aio=io_uring --format=raw --shared=8 --persistent \
    --socket="$raw/file-qemu-nbd.sock" "$FILE" || die "qemu-nbd failed to start"
  start_server file-nbdkit "$NBDKIT" -f --exit-with-parent -U "$raw/file-nbdkit.sock" file "$FILE" cache=none ||
    die "nbdkit file failed to start"
  file_servers=(ubcache qemu-nbd nbdkit raw)
fi

# 2. Interleaved runs: repeat, group, workload, then every server in turn
# (order rotated by one each repeat).
rotate() {  # rotate N ITEMS...
  local n=$1; shift; local a=("$@") k=${#a[@]} i
  for ((i = 0; i < k; i++)); do echo "${a[$(( (i + n) % k ))]}"; done
}
for ((r = 1; r <= REPEAT; r++)); do
  for w in "${wl[@]}"; do
    if [[ $want_mem == 1 ]]; then
      for s in $(rotate $((r - 1)) "${mem_servers[@]}"); do run_one mem "$s" "$w" "$r"; done
    fi
    if [[ $want_file == 1 ]]; then
      for s in $(rotate $((r - 1)) "${file_servers[@]}"); do run_one file "$s" "$w" "$r"; done
    fi
  done
done
for s in "${!PID[@]}"; do
  kill -0 "${PID[$s]}" 2>/dev/null || { echo "nbd_peers: $s died during the run:" >&2; cat "$raw/$s.log" >&2; failures=$((failures + 1)); }
done

# 3. Medians, ratios, targets; JSON + Markdown; tables on stdout.
base="$OUT/nbd_peers-$stamp"
cmdline="bench/nbd_peers.sh --ubcache $UBCACHE --file $FILE --size $SIZE --mem-size $MEM_SIZE --seconds $SECONDS_PER --repeat $REPEAT --only $WORKLOADS --x2 $X2 --groups $GROUPS_SEL --threads $THREADS"
git_rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
versions="$("$FIO" --version); $("$NBDKIT" --version 2>&1 | head -1)"
[[ $want_file == 1 ]] && versions+="; $("$QEMU_NBD" --version | head -1)"
PYTHONPATH="$here" "$PYTHON" - "$raw" "$base" "$(IFS=,; echo "${wl[*]}")" "$REPEAT" "$SECONDS_PER" "$FILE" "$size_bytes" \
  "$mem_bytes" "$GROUPS_SEL" "$cmdline" "$git_rev" "$versions" "$started" "$THREADS" <<'EOF' || failures=$((failures + 1))
import json, os, platform, statistics, sys, time

(raw, base, workloads, repeat, seconds, path, size, mem_size, groups, cmdline, git_rev,
 versions, started, threads) = sys.argv[1:15]
workloads, repeat = workloads.split(","), int(repeat)
groups = groups.split(",")
SERVERS = {"mem": ["ubcache", "nbdkit", "null"], "file": ["ubcache", "qemu-nbd", "nbdkit", "raw"]}
LABEL = {("mem", "ubcache"): "ubcache mem", ("mem", "nbdkit"): "nbdkit memory",
         ("mem", "null"): "nbdkit null (no-op server)",
         ("file", "ubcache"): "ubcache file", ("file", "qemu-nbd"): "qemu-nbd",
         ("file", "nbdkit"): "nbdkit file", ("file", "raw"): "raw io_uring"}
bad = 0

from benchlib import load as _load, cpu_of, machine_lines, write_results

def load(p):
    return _load(p, "nbd_peers")

def one_run(g, s, w, r):
    tag = f"{g}-{s}-{w}-{r}"
    j = load(f"{raw}/fio-{tag}.json")
    if not j or not j.get("jobs"):
        return None
    job = j["jobs"][0]
    if job.get("error"):
        return None
    d = job["read" if "read" in w else "write"]
    run = {"iops": d["iops"], "mbps": d["bw_bytes"] / 1e6,
           "p50_us": d["clat_ns"].get("percentile", {}).get("50.000000", 0) / 1e3,
           "p99_us": d["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1e3,
           # fio's own CPU (all its jobs, % of one core): the client side
           "fio_cpu_pct": (job.get("usr_cpu") or 0) + (job.get("sys_cpu") or 0)}
    run.update(cpu_of(raw, tag, server=s != "raw"))
    return run

def med(runs, k):
    v = [x[k] for x in runs if x and x.get(k) is not None]
    return statistics.median(v) if v else None

out = {}
for g in groups:
    rows = []
    for w in workloads:
        metric = "mbps" if "_1m_" in w else "iops"
        row = {"workload": w, "metric": metric, "servers": {}}
        for s in SERVERS[g]:
            runs = [one_run(g, s, w, r) for r in range(1, repeat + 1)]
            if not all(runs):
                bad += 1
            row["servers"][s] = {"runs": runs, **{k: med(runs, k) for k in
                                 ("iops", "mbps", "p50_us", "p99_us", "fio_cpu_pct", "server_cpu_pct")}}
        u = row["servers"]["ubcache"][metric]
        row["ratios"] = {}
        for s in SERVERS[g][1:]:
            o = row["servers"][s][metric]
            row["ratios"][s] = u / o if u is not None and o else None
        rows.append(row)
    out[g] = rows

def get(g, w, k):
    for row in out.get(g, []):
        if row["workload"] == w:
            return row["ratios"].get(k)
    return None

targets = []
def target(name, value, need):
    targets.append({"target": name, "ratio": value, "need": need,
                    "pass": value is not None and value >= need})
if "mem" in out:
    target("(i) randread_4k_qd32 ubcache/nbdkit memory >= 1.2", get("mem", "randread_4k_qd32", "nbdkit"), 1.2)
    # How far a do-nothing server gets relative to nbdkit memory: near 1
    # means the client, not the server, sets the pace.
    null, mem = (next((r["servers"][k]["iops"] for r in out["mem"] if r["workload"] == "randread_4k_qd32"), None)
                 for k in ("null", "nbdkit"))
    noop = null / mem if null and mem else None
    targets.append({"target": "    (no-op server for (i): nbdkit null / nbdkit memory)", "ratio": noop,
                    "need": 1.2, "pass": noop is not None and noop >= 1.2, "info": True})
if "file" in out:
    target("(ii) randread_4k_qd32 ubcache/qemu-nbd >= 2", get("file", "randread_4k_qd32", "qemu-nbd"), 2.0)
    target("(ii) randread_4k_qd32 ubcache/raw >= 0.9", get("file", "randread_4k_qd32", "raw"), 0.9)
    if "mem" in out:
        iops = lambda g, k: next((r["servers"][k]["iops"] for r in out[g] if r["workload"] == "randread_4k_qd32"), None)
        null, rawv = iops("mem", "null"), iops("file", "raw")
        noop = null / rawv if null and rawv else None
        targets.append({"target": "    (no-op server vs raw: nbdkit null / raw io_uring)", "ratio": noop,
                        "need": 0.9, "pass": noop is not None and noop >= 0.9, "info": True})
    for row in out["file"]:
        target(f"(ii) {row['workload']} ubcache/qemu-nbd >= 1 (no workload slower)",
               row["ratios"].get("qemu-nbd"), 1.0)

def fmt(v, metric):
    if v is None:
        return "—"
    return f"{v:.0f}" if metric == "iops" else f"{v:.0f} MB/s"

def pct(v):
    return "—" if v is None else f"{v:.0f}"

med_txt = f"median of {repeat}" if repeat > 1 else "1 run"
lines = [f"# ubcache serve vs NBD peers — {started}", "", f"`{cmdline}`", "",
         f"fio nbd engine (libnbd, one connection per fio job), {seconds} s per workload per server, "
         f"{med_txt}, servers interleaved per workload; {platform.node()}, Linux {platform.release()}, "
         f"{os.cpu_count()} CPUs; {versions}; ubcache {git_rev} (--threads {threads}). "
         "4 KiB rows are IOPS, 1 MiB rows MB/s (1e6 B/s). *_x2 = numjobs=2 (two connections, "
         "each at the row's iodepth).", ""]
for g in out:
    ss = SERVERS[g]
    title = (f"(i) RAM: ubcache mem:{int(mem_size) >> 20}M vs nbdkit memory" if g == "mem" else
             f"(ii) file {path} ({int(size) >> 20} MiB, filled)")
    lines += [f"## {title}", "",
              "| workload | " + " | ".join(LABEL[(g, s)] for s in ss) + " | " +
              " | ".join(f"ubcache/{s}" for s in ss[1:]) + " |",
              "|---|" + "---:|" * (2 * len(ss) - 1)]
    for row in out[g]:
        m = row["metric"]
        lines.append(f"| {row['workload']} | " +
                     " | ".join(fmt(row["servers"][s][m], m) for s in ss) + " | " +
                     " | ".join("—" if row["ratios"][s] is None else f"{row['ratios'][s]:.2f}"
                                for s in ss[1:]) + " |")
    lines += ["", "CPU, % of one core (median): server process (all threads) / fio client:", "",
              "| workload | " + " | ".join(LABEL[(g, s)] for s in ss) + " |",
              "|---|" + "---:|" * len(ss)]
    for row in out[g]:
        lines.append(f"| {row['workload']} | " + " | ".join(
            (f"{pct(row['servers'][s]['server_cpu_pct'])} / " if s != "raw" else "— / ") +
            pct(row["servers"][s]["fio_cpu_pct"]) for s in ss) + " |")
    lines.append("")
busy = [r["machine"] for g in out for row in out[g] for s in row["servers"].values()
        for r in s["runs"] if r and "machine" in r]
lines += machine_lines(busy)
lines += ["Targets (issue 3):", ""]
for t in targets:
    v = "—" if t["ratio"] is None else f"{t['ratio']:.2f}"
    verdict = "info" if t.get("info") else ("PASS" if t["pass"] else "MISS")
    lines.append(f"    {verdict} {t['target']}: {v}")
md = "\n".join(lines) + "\n"

doc = {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": cmdline,
       "file": path, "size_bytes": int(size), "mem_size_bytes": int(mem_size), "seconds": int(seconds),
       "repeat": repeat, "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
       "versions": versions, "ubcache_rev": git_rev, "ubcache_threads": int(threads),
       "groups": out, "targets": targets}
write_results(base, doc, md)
sys.exit(1 if bad else 0)
EOF

bench_finish
