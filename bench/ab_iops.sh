#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ab_iops.sh A B — what a change costs: two builds of ubcache (A, before; B,
# after) each serve their own warm cache at the same time, and fio 4 KiB
# randread QD32 through NBD (fio's nbd engine) runs against one, then the
# other, the order swapped each repeat (A B, B A, …) so a shared machine's
# drifting load falls on both. An idle daemon waits in io_uring_enter and
# costs the other nothing. Two sessions of REPEAT/2 repeats each, the
# daemons restarted in between with their slots (socket, start order)
# swapped: on the 2-vCPU dev VM the daemon started second ran ~5 % faster
# with the very same binary, a bias that the swap cancels.
#
# Prints each run and one JSON object: IOPS of each, the ratio B/A of the
# sums and the median of the per-repeat ratios; and the daemons' CPU time
# per request (schedstat of all their threads over the run; it includes
# the reactor's 50 µs spin before it sleeps), median and median per-repeat
# ratio B/A — less noisy than IOPS on a shared machine. doc/control.md
# measured the request counters and latency histogram this way.
#
# The caches: CACHE=file (default) — sparse files under DIR with O_DIRECT,
# as ctl_stall.sh; CACHE=mem — both devices in RAM, so the daemon's CPU is
# all there is to measure and a per-request cost shows at its largest.
# Environment: WS (working set, 1G), RUNTIME (s per run, 5), REPEAT (12),
# THREADS (serve --threads, 0), DIR. Benchmarks are not tests: exit status
# is non-zero only when a tool fails.
set -euo pipefail
[[ $# == 2 && -x $1 && -x $2 ]] || { echo "usage: $0 UBCACHE_A UBCACHE_B" >&2; exit 2; }
WS=${WS:-1G}
RUNTIME=${RUNTIME:-5}
REPEAT=${REPEAT:-12}
THREADS=${THREADS:-0}
CACHE=${CACHE:-file}
DIR=${DIR:-/var/tmp/ubcache-ab-iops}
rm -rf "$DIR"
mkdir -p "$DIR"
declare -A PID BIN=([A]=$1 [B]=$2)
stop() {
  local p
  for p in "${PID[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  PID=()
  rm -f "$DIR"/*.img
}
trap stop EXIT

# serve WHO SLOT — binary WHO (A or B) on $DIR/SLOT.sock over its own warm cache.
serve() {
  local who=$1 slot=$2 cache backing
  if [[ $CACHE == mem ]]; then
    cache=mem:$((2 * $(numfmt --from=iec "$WS")))
    backing=mem:$WS
  else
    truncate -s "$((2 * $(numfmt --from=iec "$WS")))" "$DIR/$slot.cache.img"
    truncate -s "$WS" "$DIR/$slot.backing.img"
    cache=$DIR/$slot.cache.img backing=$DIR/$slot.backing.img
  fi
  "${BIN[$who]}" serve --cache "$cache" --backing "$backing" --nbd "unix:$DIR/$slot.sock" --threads "$THREADS" \
    --control "$DIR/$slot.ctl" \
    --sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0 \
    2>"$DIR/$slot.$who.log" &
  PID[$who]=$!
  SOCK[$who]=$DIR/$slot.sock CTL[$who]=$DIR/$slot.ctl
  for _ in $(seq 400); do [[ -S $DIR/$slot.sock ]] && break; sleep 0.05; done
  [[ -S $DIR/$slot.sock ]] || { cat "$DIR/$slot.$who.log" >&2; exit 1; }
  fio --name=warm --ioengine=nbd --uri="nbd+unix:///?socket=$DIR/$slot.sock" --rw=read --bs=1M \
    --iodepth=4 --size="$WS" --output-format=terse >/dev/null
}
declare -A SOCK CTL

# cpu_ns WHO — the CPU time daemon WHO's threads have used, ns.
cpu_ns() { cat /proc/"${PID[$1]}"/task/*/schedstat | awk '{ns += $1} END {printf "%.0f\n", ns}'; }

# run WHO N — one fio randread against daemon WHO; prints its IOPS and the
# daemon's CPU time per request, µs.
run() {
  local before after
  before=$(cpu_ns "$1")
  fio --name=rr --ioengine=nbd --uri="nbd+unix:///?socket=${SOCK[$1]}" --rw=randread --bs=4k --iodepth=32 \
    --size="$WS" --time_based --runtime="$RUNTIME" --randrepeat=0 --output-format=json \
    --output="$DIR/fio.$1.$2.json" >/dev/null
  after=$(cpu_ns "$1")
  python3 -c 'import json,sys; t=open(sys.argv[1]).read(); r=json.loads(t[t.index("{"):])["jobs"][0]["read"]
print(r["iops"], (int(sys.argv[3]) - int(sys.argv[2])) / 1000 / r["total_ios"])' \
    "$DIR/fio.$1.$2.json" "$before" "$after"
}

a=() b=() ca=() cb=() hits=()
one() {  # one repeat's run of WHO
  local x y
  read -r x y < <(run "$1" "$2")
  if [[ $1 == A ]]; then a+=("$x"); ca+=("$y"); else b+=("$x"); cb+=("$y"); fi
}
r=0
for session in "A B" "B A"; do
  read -r first second <<<"$session"
  serve "$first" s1
  serve "$second" s2
  sleep 1  # the warm-up's cache writes finish after its reads are answered
  for _ in $(seq $((REPEAT / 2))); do
    r=$((r + 1))
    if ((r % 2)); then one A "$r"; one B "$r"; else one B "$r"; one A "$r"; fi
    printf 'ab_iops: repeat %d (A in slot %s): A %.0f IOPS %.2f us CPU/request, B %.0f IOPS %.2f us CPU/request\n' \
      "$r" "$([[ $first == A ]] && echo 1 || echo 2)" "${a[-1]}" "${ca[-1]}" "${b[-1]}" "${cb[-1]}" >&2
  done
  # Warm means hits: each daemon's hit ratio over the session.
  for who in A B; do hits+=("$("${BIN[$who]}" ctl --control "${CTL[$who]}" get stats_total/cache_hit_ratio)"); done
  stop
done

python3 - "${a[*]}" "${b[*]}" "${ca[*]}" "${cb[*]}" "${hits[*]}" "$CACHE" "$WS" "$RUNTIME" <<'PY'
import json, statistics, sys
a, b, ca, cb, hits = ([float(x) for x in arg.split()] for arg in sys.argv[1:6])
print(json.dumps({
    "cache": sys.argv[6], "working_set": sys.argv[7], "runtime_s": int(sys.argv[8]),
    "hit_ratio_percent": [int(h) for h in hits],
    "iops_a": [round(x) for x in a], "iops_b": [round(x) for x in b],
    "ratio": round(sum(b) / sum(a), 4),
    "ratio_median": round(statistics.median(y / x for x, y in zip(a, b)), 4),
    "cpu_us_per_request_a": round(statistics.median(ca), 3), "cpu_us_per_request_b": round(statistics.median(cb), 3),
    "cpu_ratio_median": round(statistics.median(y / x for x, y in zip(ca, cb)), 4),
}))
PY
