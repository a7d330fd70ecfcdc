#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ctl_stall.sh — does reading statistics stall I/O? (issue 5's stall test,
# after bcache's Launchpad 1840043: priority_stats sorted every bucket under
# the bucket lock while node_exporter polled it, ~40k -> ~4k IOPS.)
#
# A sparse cache file of CACHE_SIZE with BUCKET buckets (default 64 GiB of
# 64 KiB: 1M buckets), a working set WS warmed into it (sequential cutoff 0),
# then fio 4 KiB randread QD32 through NBD (fio's nbd engine), measured two
# ways:
#   - alternating (the verdict): one fio run of ALT_SECONDS (120) with
#     ctl_poller --alternate 1 polling in the even wall-clock seconds only,
#     fio logging IOPS every 100 ms in unix time; each polled second is
#     compared with the mean of the unpolled seconds on either side (a
#     linear drift of the machine's load cancels), samples within 200 ms
#     after a switch left out. Ratio: median and mean of those per-second
#     ratios with the mean's 95 % confidence interval;
#   - runs (for reference): RUNTIME seconds (5), REPEAT (12) times without
#     and with ctl_poller
# (bench/ctl_poller.cpp, built next to ubcache as build/bench/ctl_poller)
# querying priority-stats, stats and metrics RATE times a second over the
# control socket (order swapped each repeat: many short alternating runs,
# so that a shared machine's drifting load falls on both sides). Reports the IOPS ratio (with/without:
# the ratio of the sums and the median of the per-repeat ratios; target
# >= 0.99), the poller's query latency as the client sees it (p50, p99,
# max: includes its own scheduling on a loaded machine) and as the daemon
# measures it (request received to reply queued: wall p99 and max, and the
# control thread's CPU time per request; target: every query < 5 ms). Prints one JSON
# object on stdout.
#
# Options are environment variables: CACHE_SIZE BUCKET WS ALT_SECONDS
# RUNTIME REPEAT RATE DIR UBCACHE POLLER, POLL_COMMANDS (default priority-stats,stats,metrics) and
# POLL_ARGS (e.g. --connect-each: a new connection per query, as ctl does). Benchmarks are not tests: exit status is non-zero only
# when a tool fails.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
CACHE_SIZE=${CACHE_SIZE:-64G}
BUCKET=${BUCKET:-64k}
WS=${WS:-1G}
RUNTIME=${RUNTIME:-5}
ALT_SECONDS=${ALT_SECONDS:-120}
REPEAT=${REPEAT:-12}
RATE=${RATE:-100}
POLL_ARGS=${POLL_ARGS:-}
UBCACHE=${UBCACHE:-$repo/build/ubcache}
POLLER=${POLLER:-$(dirname "$UBCACHE")/bench/ctl_poller}
DIR=${DIR:-/var/tmp/ubcache-ctl-stall}

[[ -x $UBCACHE ]] || { echo "ctl_stall: $UBCACHE is not built" >&2; exit 2; }
[[ -x $POLLER ]] || { echo "ctl_stall: $POLLER is not built (cmake --build build --target ctl_poller)" >&2; exit 2; }
rm -rf "$DIR"
mkdir -p "$DIR"
SERVER=""
cleanup() {
  [[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
  rm -f "$DIR"/*.img
}
trap cleanup EXIT
truncate -s "$CACHE_SIZE" "$DIR/cache.img"
truncate -s "$WS" "$DIR/backing.img"
SOCK=$DIR/nbd.sock CTL=$DIR/ctl.sock
"$UBCACHE" serve --cache "$DIR/cache.img" --bucket-size "$BUCKET" --backing "$DIR/backing.img" \
  --nbd "unix:$SOCK" --control "$CTL" --sequential-cutoff 0 \
  --congested-read-threshold-us 0 --congested-write-threshold-us 0 2>"$DIR/server.log" &
SERVER=$!
for _ in $(seq 400); do [[ -S $SOCK ]] && break; kill -0 $SERVER || break; sleep 0.05; done
[[ -S $SOCK ]] || { cat "$DIR/server.log" >&2; exit 1; }
URI="nbd+unix:///?socket=$SOCK"
nbuckets=$("$UBCACHE" ctl --control "$CTL" get nbuckets)
echo "ctl_stall: $nbuckets buckets of $BUCKET; warming $WS" >&2
fio --name=warm --ioengine=nbd --uri="$URI" --rw=read --bs=1M --iodepth=4 --size="$WS" \
  --output-format=terse >/dev/null
# Cache writes of the warm-up finish after the reads are answered.
sleep 1

# poller TAG ARGS... — ctl_poller in the background (pid in $ppid), its JSON
# in poll.TAG.json.
poller() {
  local tag=$1; shift
  "$POLLER" "$CTL" --rate "$RATE" ${POLL_COMMANDS:+--commands "$POLL_COMMANDS"} $POLL_ARGS "$@" >"$DIR/poll.$tag.json" &
  ppid=$!
}

# randread TAG SECONDS ARGS... — fio 4 KiB randread QD32 over the working
# set, its JSON in fio.TAG.json.
randread() {
  local tag=$1 secs=$2; shift 2
  fio --name=rr --ioengine=nbd --uri="$URI" --rw=randread --bs=4k --iodepth=32 --size="$WS" \
    --time_based --runtime="$secs" --randrepeat=0 "$@" --output-format=json --output="$DIR/fio.$tag.json" >/dev/null
}

# run TAG POLL — one fio randread; prints IOPS; with POLL=1 the poller runs alongside.
run() {
  local tag=$1 poll=$2 ppid=""
  [[ $poll == 1 ]] && poller "$tag"
  randread "$tag" "$RUNTIME"
  if [[ -n $ppid ]]; then kill -TERM "$ppid"; wait "$ppid"; fi
  python3 -c 'import json,sys; t=open(sys.argv[1]).read(); print(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"])' \
    "$DIR/fio.$tag.json"
}

# The alternating run: the poller polls in even unix seconds; fio logs IOPS
# every 100 ms stamped with unix time, matched to the seconds afterwards.
echo "ctl_stall: one run of $ALT_SECONDS s, polling in every other second" >&2
poller alternate --alternate 1
randread alternate "$ALT_SECONDS" --write_iops_log="$DIR/alt" --log_avg_msec=100 --log_unix_epoch=1
kill -TERM "$ppid"; wait "$ppid"

without=() with=()
for r in $(seq "$REPEAT"); do
  if ((r % 2)); then
    without+=("$(run "a$r" 0)"); with+=("$(run "b$r" 1)")
  else
    with+=("$(run "b$r" 1)"); without+=("$(run "a$r" 0)")
  fi
  echo "ctl_stall: repeat $r: without ${without[-1]} IOPS, with polling ${with[-1]} IOPS" >&2
done
kill -TERM $SERVER; wait $SERVER || true; SERVER=""
hits=$(grep -o 'cache_hit_ratio [0-9]*%' "$DIR/server.log" | tail -1)
timing=$(grep -o 'control: .* requests answered.*' "$DIR/server.log" | tail -1)
slow=$(grep -c "control: '.*' took" "$DIR/server.log" || true)
python3 - "$DIR" "$nbuckets" "$hits" "${without[*]}" "${with[*]}" "$timing" "$slow" <<'PY'
import glob, json, math, re, statistics, sys
d, nbuckets, hits, wo, wi, timing, slow = sys.argv[1:]

def alternating(log):
    # fio's iops log: "unix ms, IOPS over the 100 ms before it, ...". A sample
    # belongs to the second its window lies in; the first two after a switch
    # (the poller starting or stopping) are left out.
    per = {}
    for line in open(log):
        f = line.split(",")
        if len(f) < 2:
            continue
        t, v = int(f[0]), float(f[1])
        s, into = divmod(t - 100, 1000)  # the window's start
        if into < 200:
            continue
        per.setdefault(s, []).append(v)
    sec = {s: statistics.mean(v) for s, v in per.items() if len(v) >= 5}
    ratios = [sec[s] / ((sec[s - 1] + sec[s + 1]) / 2) for s in sorted(sec)
              if s % 2 == 0 and s - 1 in sec and s + 1 in sec and sec[s - 1] + sec[s + 1] > 0]
    on = [v for s, v in sec.items() if s % 2 == 0]
    off = [v for s, v in sec.items() if s % 2 == 1]
    if len(ratios) < 3:
        sys.exit(f"alternating run: only {len(ratios)} polled seconds with unpolled neighbours in {log}")
    mean = statistics.mean(ratios)
    half = 1.96 * statistics.stdev(ratios) / math.sqrt(len(ratios))
    return {"seconds_polled": len(on), "seconds_unpolled": len(off), "pairs": len(ratios),
            "iops_polled": round(statistics.mean(on)), "iops_unpolled": round(statistics.mean(off)),
            "ratio_median": round(statistics.median(ratios), 4), "ratio_mean": round(mean, 4),
            "ratio_ci95": [round(mean - half, 4), round(mean + half, 4)],
            "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4)}

m = re.search(r"(\d+) requests answered in wall p50 <= (\d+) us, p99 <= (\d+) us, max (\d+) us; thread cpu (\d+) us \((\d+) us per request\)", timing)
if not m:
    sys.exit(f"no control timing line in the server log: {timing!r}")
wo = [float(x) for x in wo.split()]
wi = [float(x) for x in wi.split()]
polls = [json.load(open(p)) for p in sorted(glob.glob(d + "/poll.*.json"))]
out = {
    "buckets": int(nbuckets), "hits": hits,
    "alternate": alternating(glob.glob(d + "/alt_iops*.log")[0]),
    "iops_without": [round(x) for x in wo], "iops_with": [round(x) for x in wi],
    "ratio": round(sum(wi) / sum(wo), 4),
    "ratio_median": round(statistics.median(b / a for a, b in zip(wo, wi)), 4),
    "queries": sum(p["count"] for p in polls), "query_errors": sum(p["errors"] for p in polls),
    "query_rate": [p["rate"] for p in polls],
    "query_p50_ms": max(p["p50_ms"] for p in polls), "query_p99_ms": max(p["p99_ms"] for p in polls),
    "query_max_ms": max(p["max_ms"] for p in polls),
    "server_requests": int(m[1]), "server_wall_p99_us": int(m[3]), "server_wall_max_us": int(m[4]),
    "server_cpu_per_request_us": int(m[6]), "server_requests_over_5ms": int(slow),
}
print(json.dumps(out))
PY
