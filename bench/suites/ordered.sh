#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ordered — issue 30's cost question: what does `writeback_order flush` (the
# default: dirty data reaches the backing device epoch by epoch, epochs
# delimited by the client's FLUSH/FUA, so the spindle always holds a state a
# power cut could have left) cost against `lba` (bcache's address order, the
# fastest drain, no such promise)?
#
# For each order (flush, then lba; ORD_ORDERS): a fresh formatted 1 GiB
# cache file in front of a formatted 4 GiB `sas:` backing file, served in
# writeback with `--set writeback_order=ORDER`, and fio 4 KiB randwrite over
# 3 GiB of it (three times the cache: dirty data climbs to about
# cutoff_writeback within the first minute and stays there), one job at QD16
# (fio's nbd engine, one connection) with fsync=100 — a FLUSH after every
# 100th write, sysbench fileio's default and the tuning suite's; at QD16 fio
# sends its FLUSHes in a burst (the daemon's request counters, recorded,
# give the real count). It runs ORD_SECONDS (600; --quick 60) while the
# daemon is sampled once a second (dirty_data, writeback_lag_seconds,
# dirty_epochs, ordered_waits, ordered_wait_us, cutoff_writethroughs,
# writeback_written, writeback_rate) and fio logs its write IOPS each second.
# Then fio stops; one 4 KiB discard (fio --rw=trim, past the written
# region) is timed — in flush order a discard reaches the backing device
# only after every older epoch (design.md rule 14), so it waits for the
# whole backlog; stopped after ORD_TRIM_MAX (60 s; --quick 20 s). Then
# `ctl flush` drains what is dirty, timed: the drain rate
# is the dirty bytes it wrote back over its seconds. A drain that would take
# longer than ORD_FLUSH_MAX (900 s; --quick 30 s) is stopped there and its
# rate is what it drained so far (marked "capped"); the daemon is then
# killed (kill -9 loses nothing acknowledged; a SIGTERM would wait for the
# abandoned drain to finish).
#
# Then dbench on ext4 over ubcache in writeback in each order of
# ORD_DBENCH_ORDERS (flush lba) at ORD_DBENCH_CLIENTS (1 8 32 128), 30 s a
# point (--quick 8 s), on the scaling suite's geometry and files (an 8 GiB
# cache in front of a 4 GiB sas: backing, ext4 through nbdfuse + losetup):
# issue 30's "dbench at 128 clients >= 0.9x its peak in flush order", one
# sweep (the scaling suite's fresh-start pairs are the careful verdict; its
# writeback rows run the default order, flush).
#
# Environment: ORD_SECONDS, ORD_FLUSH_MAX, ORD_TRIM_MAX, ORD_ORDERS, ORD_QD,
# ORD_FSYNC, ORD_REGION, ORD_CACHE_SIZE, ORD_BACKING_SIZE,
# ORD_DBENCH_CLIENTS (empty: no dbench), ORD_DBENCH_SECONDS,
# ORD_DBENCH_ORDERS, ORD_SERVE_ARGS (extra serve flags for every daemon).
set -euo pipefail
. "$(dirname "$0")/common.sh"

if [[ $QUICK == 1 ]]; then
  secs=${ORD_SECONDS:-60} flush_max=${ORD_FLUSH_MAX:-30} dsecs=${ORD_DBENCH_SECONDS:-8} trim_max=${ORD_TRIM_MAX:-20}
else
  secs=${ORD_SECONDS:-600} flush_max=${ORD_FLUSH_MAX:-900} dsecs=${ORD_DBENCH_SECONDS:-30} trim_max=${ORD_TRIM_MAX:-60}
fi
orders=${ORD_ORDERS:-flush lba}
qd=${ORD_QD:-16} fsync=${ORD_FSYNC:-100} region=${ORD_REGION:-3G}
CACHE_SIZE=${ORD_CACHE_SIZE:-1G} BACKING_SIZE=${ORD_BACKING_SIZE:-4G}
dclients=${ORD_DBENCH_CLIENTS-1 8 32 128}
dorders=${ORD_DBENCH_ORDERS:-flush lba}
CACHE=$WORK/ordered-cache.img
BACKING=$WORK/ordered-backing.img
# The dbench pass shares the scaling suite's files (formatted afresh here
# as there): no second 12 GiB under $WORK.
DCACHE=$WORK/scaling-cache.img DBACKING=$WORK/scaling-backing.img DCACHE_SIZE=8G DFS_SIZE=4G
sized_file "$CACHE" "$CACHE_SIZE"
sized_file "$BACKING" "$BACKING_SIZE"
if [[ -n $dclients ]]; then sized_file "$DCACHE" "$DCACHE_SIZE"; sized_file "$DBACKING" "$DFS_SIZE"; fi
fs_setup

n=0 total=$(( $(wc -w <<<"$orders") * 2 + $(wc -w <<<"$dorders") * $(wc -w <<<"$dclients") ))

# sample: one line of JSON, the time and the attributes the suite follows,
# from one `ctl --json show` (cheaper than a ctl per attribute).
KEYS='dirty_data|writeback_lag_seconds|dirty_epochs|ordered_waits|ordered_wait_us|ordered_room_retries|cutoff_writethroughs|writeback_written|writeback_rate|requests/write|requests/flush|request_bytes/write|cache_available_percent|free_buckets'
sample() {
  local j t
  t=$(date +%s.%N)
  j=$(ctl --json show 2>/dev/null) || return 0
  printf '{"t":%s,%s}\n' "$t" "$(grep -oE "\"($KEYS)\":[0-9.eE+-]+" <<<"$j" | paste -sd,)"
}
# sampler FILE: sample once a second into FILE until killed.
sampler() { while :; do sample; sleep 1; done >>"$1"; }
stop_bg() { pkill -P "$1" 2>/dev/null || true; kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# server_stop HOW: stop serve_up's daemon; TERM waits up to 30 s, then KILL.
server_stop() {
  [[ -n $SRV ]] || return 0
  kill "-$1" "$SRV" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SRV" 2>/dev/null || true
  { wait "$SRV"; } 2>/dev/null || true  # bash's "Killed" notice too
  SRV=""
}

# --- 1. sustained random writes, then the drain, in each order -------------
for order in $orders; do
  P=$SUITE_DIR/$order
  n=$((n + 1))
  bench_progress "$order: fio 4 KiB randwrite QD$qd fsync=$fsync over $region of a $CACHE_SIZE cache, $secs s ($n/$total)"
  "$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --force >"$P-format.log" 2>&1
  # shellcheck disable=SC2086  # ORD_SERVE_ARGS holds flags
  serve_up "$P-server.log" --cache "$CACHE" --backing "sas:$BACKING" --cache-mode writeback \
    --set writeback_order="$order" ${ORD_SERVE_ARGS:-}
  [[ $(ctl get writeback_order) == "$order" ]] || { echo "ordered: writeback_order is not $order" >&2; exit 1; }
  ctl --json show >"$P-show-start.json"
  : >"$P-samples.jsonl"
  sampler "$P-samples.jsonl" & smp=$!
  t_fio0=$(date +%s.%N)
  rm -f "$P"_iops.*.log
  fio --name="randwrite-$order" --ioengine=nbd --uri="nbd+unix:///?socket=$FS_TMP/s.sock" --rw=randwrite --bs=4k \
    --iodepth="$qd" --size="$region" --fsync="$fsync" --norandommap --time_based --runtime="$secs" \
    --write_iops_log="$P" --log_avg_msec=1000 --log_unix_epoch=1 \
    --output-format=json --output="$P-fio.json" >/dev/null 2>"$P-fio.err" ||
    { echo "ordered: fio in $order order failed: $(tail -n 3 "$P-fio.err")" >&2; exit 1; }
  t_fio1=$(date +%s.%N)
  ctl --json show >"$P-show-end.json"
  # One 4 KiB discard past the written region, at the cutoff: in flush
  # order it goes to the backing device only after every older epoch is
  # written back (rule 14's gate). Stopped at ORD_TRIM_MAX (fio killed; the
  # daemon finishes it during the drain below).
  n=$((n + 1))
  bench_progress "$order: one 4 KiB discard (at most $trim_max s), then ctl flush (at most $flush_max s) ($n/$total)"
  ow0=$(ctl get ordered_waits)
  trc=0
  timeout -s KILL "$trim_max" fio --name="trim-$order" --ioengine=nbd --uri="nbd+unix:///?socket=$FS_TMP/s.sock" \
    --rw=trim --bs=4k --size=4k --offset="$region" --output-format=json --output="$P-trim.json" \
    >/dev/null 2>"$P-trim.err" || trc=$?
  t_trim1=$(date +%s.%N)
  case $trc in
    0) trim_done=1 ;;
    137) trim_done=0 ;;
    *) echo "ordered: fio trim in $order order failed ($trc): $(tail -n 3 "$P-trim.err")" >&2; exit 1 ;;
  esac
  trim_waits=$(( $(ctl get ordered_waits) - ow0 ))
  d0=$(ctl get dirty_data)
  echo "ordered: $order: the discard took $(awk -v a="$t_fio1" -v b="$t_trim1" 'BEGIN{printf "%.1f", b-a}') s$([[ $trim_done == 1 ]] || echo " (stopped: still waiting)"); ctl flush of $(( d0 >> 20 )) MiB dirty"
  rc=0
  timeout "$flush_max" "$UBCACHE" ctl --control "$FS_TMP/c.ctl" flush >"$P-flush.txt" 2>&1 || rc=$?
  t_fl1=$(date +%s.%N)
  d1=$(ctl get dirty_data 2>/dev/null || echo "")
  stop_bg "$smp"
  ctl --json show >"$P-show-flushed.json" 2>/dev/null || true
  case $rc in
    0) completed=1; server_stop TERM ;;
    124) completed=0; server_stop KILL ;;  # the daemon would drain on before a SIGTERM returns
    *) echo "ordered: ctl flush in $order order failed ($rc): $(tail -n 3 "$P-flush.txt")" >&2; exit 1 ;;
  esac
  printf '{"t_fio0":%s,"t_fio1":%s,"t_trim1":%s,"trim_completed":%s,"trim_ordered_waits":%s,"t_flush1":%s,"dirty_flush0":%s,"dirty_flush1":%s,"flush_completed":%s}\n' \
    "$t_fio0" "$t_fio1" "$t_trim1" "$trim_done" "$trim_waits" "$t_fl1" "$d0" "${d1:-null}" "$completed" >"$P-phases.json"
  echo "ordered: $order: fio $("${PYTHON:-python3}" -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["write"]["iops"]))' "$P-fio.json") write IOPS; flush: $(tail -n 1 "$P-flush.txt") (rc $rc)"
done

# --- 2. dbench at 1 … 128 clients on ext4 over writeback, in each order ------
: >"$SUITE_DIR/dbench.tsv"
for order in $dorders; do
  [[ -n $dclients ]] || break
  "$UBCACHE" format --cache "$DCACHE" --backing "$DBACKING" --force >"$SUITE_DIR/dbench-format.log" 2>&1
  # shellcheck disable=SC2086
  serve_up "$SUITE_DIR/dbench-server-$order.log" --cache "$DCACHE" --backing "sas:$DBACKING" --cache-mode writeback \
    --set writeback_order="$order" ${ORD_SERVE_ARGS:-}
  fs_up_export
  fs_mkfs "$SUITE_DIR/dbench-mkfs-$order.log"
  for c in $dclients; do
    n=$((n + 1))
    bench_progress "$order: dbench $c client(s), $dsecs s, ext4 over writeback ($n/$total)"
    rm -rf "$MNT/clients"
    out=$SUITE_DIR/dbench-$order-$c.txt
    ow0=$(ctl get ordered_waits) ou0=$(ctl get ordered_wait_us) cw0=$(ctl get cutoff_writethroughs) rr0=$(ctl get ordered_room_retries)
    dz0=$(( $(ctl get requests/discard) + $(ctl get requests/write_zeroes) ))
    dbench -D "$MNT" -t "$dsecs" -c /usr/share/dbench/client.txt "$c" >"$out" 2>&1 ||
      { echo "ordered: dbench $c in $order order failed: $(tail -n 3 "$out")" >&2; exit 1; }
    line=$(grep -E '^Throughput' "$out" | tail -n 1)
    [[ -n $line ]] || { echo "ordered: no Throughput line in $out" >&2; exit 1; }
    mbs=$(awk '{print $2}' <<<"$line"); lat=$(grep -oE 'max_latency=[0-9.]+' <<<"$line" | cut -d= -f2)
    # The slowest operation of dbench's table (ms; its max_latency is per
    # interval), and what the daemon counted meanwhile.
    opmax=$(awk '/^ Operation/ { t = 1; next } t && NF == 4 && $4 + 0 > m { m = $4 + 0 } END { print m + 0 }' "$out")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$order" "$c" "$mbs" "${lat:-}" "$(ctl get dirty_data)" \
      "$(ctl get writeback_lag_seconds)" "$(( $(ctl get ordered_waits) - ow0 ))" \
      "$(( $(ctl get cutoff_writethroughs) - cw0 ))" "$(( $(ctl get ordered_wait_us) - ou0 ))" \
      "$(( $(ctl get requests/discard) + $(ctl get requests/write_zeroes) - dz0 ))" "$opmax" \
      "$(ctl get cache_available_percent)" "$(( $(ctl get ordered_room_retries) - rr0 ))" >>"$SUITE_DIR/dbench.tsv"
    echo "ordered: dbench $order $c clients: $mbs MB/s, max latency ${lat:-?} ms"
  done
  rm -rf "$MNT/clients"
  fs_down
done

# --- result.json -------------------------------------------------------------
# shellcheck disable=SC2086  # $orders: one argument per order
"${PYTHON:-python3}" - "$SUITE_DIR" "$secs" "$flush_max" "$trim_max" "$qd" "$fsync" "$region" "$CACHE_SIZE" "$BACKING_SIZE" \
  "$dsecs" "$DCACHE_SIZE" "$DFS_SIZE" $orders <<'PY'
import json, os, statistics, sys
d, secs, flush_max, trim_max, qd, fsync, region, cache_size, backing_size, dsecs, dcache, dfs = sys.argv[1:13]
orders = sys.argv[13:]


def pct(v, p):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    k = (len(v) - 1) * p / 100
    lo = int(k)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (k - lo)


def mean(v):
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None


out = {"seconds": int(secs), "flush_max_s": int(flush_max), "trim_max_s": int(trim_max), "iodepth": int(qd), "fsync": int(fsync), "region": region,
       "cache_size": cache_size, "backing_size": backing_size, "orders": {}}
for order in orders:
    p = os.path.join(d, order)
    if not os.path.exists(p + "-phases.json"):
        continue
    ph = json.load(open(p + "-phases.json"))
    t0, t1, t2 = ph["t_fio0"], ph["t_fio1"], ph["t_flush1"]
    tt = ph.get("t_trim1", t1)
    s0 = json.load(open(p + "-show-start.json"))
    s1 = json.load(open(p + "-show-end.json"))
    samples = []
    for line in open(p + "-samples.jsonl"):
        try:
            s = json.loads(line)
        except ValueError:
            continue
        s["t"] = round(s["t"] - t0, 2)
        samples.append(s)
    iops = []  # (seconds since fio's start, write IOPS of that second)
    logs = sorted(f for f in os.listdir(d) if f.startswith(order + "_iops.") and f.endswith(".log"))
    for f in logs:
        for line in open(os.path.join(d, f)):
            x = [c.strip() for c in line.split(",")]
            if len(x) >= 3 and x[2] == "1":
                iops.append((round(int(x[0]) / 1000 - t0, 2), float(x[1])))
    j = json.load(open(p + "-fio.json"))["jobs"][0]
    w, sy = j["write"], j.get("sync", {})
    pc = w.get("clat_ns", {}).get("percentile", {})
    spc = sy.get("lat_ns", {}).get("percentile", {})
    during = [s for s in samples if s["t"] <= t1 - t0]
    lag = [s.get("writeback_lag_seconds") for s in during]
    dirty = [s.get("dirty_data") for s in during]
    iv = [v for _, v in iops]
    half = [v for t, v in iops if t >= (t1 - t0) / 2]
    data_bytes = s0.get("nbuckets", 0) * s0.get("bucket_size", 0)
    mx = max((x for x in dirty if x is not None), default=None)
    # When dirty data first came within 5 % of its highest: the cutoff reached.
    t_cut = next((s["t"] for s in during if mx and s.get("dirty_data", 0) >= 0.95 * mx), None)
    delta = lambda k: (s1.get(k, 0) - s0.get(k, 0)) if k in s1 else None
    fl0, fl1 = ph["dirty_flush0"], ph["dirty_flush1"]
    drained = fl0 - (fl1 or 0) if ph["flush_completed"] else (fl0 - fl1 if fl1 is not None else None)
    fsecs = t2 - tt
    tail = [l.strip() for l in open(p + "-flush.txt") if l.strip()][-2:]
    out["orders"][order] = {
        "fio": {"iops": w["iops"], "writes": w["total_ios"], "syncs": sy.get("total_ios"),
                "clat_p50_us": pc.get("50.000000", 0) / 1e3, "clat_p99_us": pc.get("99.000000", 0) / 1e3,
                "clat_max_us": w.get("clat_ns", {}).get("max", 0) / 1e3,
                "sync_p99_us": spc.get("99.000000", 0) / 1e3 if spc else None},
        "iops_mean": mean(iv), "iops_median": pct(iv, 50), "iops_second_half_mean": mean(half),
        "lag_max_s": max((x for x in lag if x is not None), default=None), "lag_p50_s": pct(lag, 50),
        "lag_p99_s": pct(lag, 99), "lag_end_s": lag[-1] if lag else None,
        "epochs_max": max((s.get("dirty_epochs", 0) for s in during), default=None),
        "free_buckets_min": min((s["free_buckets"] for s in during if "free_buckets" in s), default=None),
        "cache_available_min": min((s["cache_available_percent"] for s in during
                                    if "cache_available_percent" in s), default=None),
        "dirty_max": mx, "dirty_end": dirty[-1] if dirty else None,
        "dirty_second_half_median": pct([s.get("dirty_data") for s in during if s["t"] >= (t1 - t0) / 2], 50),
        "cache_data_bytes": data_bytes, "cutoff_writeback": s0.get("cutoff_writeback"),
        "cutoff_writeback_sync": s0.get("cutoff_writeback_sync"), "cutoff_reached_s": t_cut,
        "lag_target_s": s0.get("writeback_lag_target"),
        "ordered_waits": delta("ordered_waits"), "ordered_wait_us": delta("ordered_wait_us"),
        "ordered_room_retries": delta("ordered_room_retries"),
        "cutoff_writethroughs": delta("cutoff_writethroughs"), "writeback_written": delta("writeback_written"),
        "client_writes": delta("requests/write"), "client_flushes": delta("requests/flush"),
        "flush": {"dirty_start": fl0, "dirty_end": fl1, "seconds": fsecs, "completed": bool(ph["flush_completed"]),
                  "drained": drained, "rate_mib_s": drained / fsecs / 2**20 if drained is not None and fsecs > 0 else None,
                  "last_lines": tail},
        "fio_seconds": t1 - t0,
        "trim": {"seconds": tt - t1, "completed": bool(ph.get("trim_completed", 1)),
                 "ordered_waits": ph.get("trim_ordered_waits")},
        "samples": samples, "iops_series": iops,
    }
db = {}
tsv = os.path.join(d, "dbench.tsv")
if os.path.exists(tsv):
    for line in open(tsv):
        o, c, mbs, lat, dirty, lag, ow, cw, ou, dz, opmax, avail, *rr = line.rstrip("\n").split("\t")
        db.setdefault(o, []).append({"clients": int(c), "mb_s": float(mbs), "max_latency_ms": float(lat) if lat else None,
                                     "dirty_after": int(dirty), "lag_after_s": float(lag), "ordered_waits": int(ow),
                                     "cutoff_writethroughs": int(cw), "ordered_wait_us": int(ou),
                                     "discards_and_zeroes": int(dz), "op_max_latency_ms": float(opmax),
                                     "cache_available_percent_after": int(avail),
                                     "ordered_room_retries": int(rr[0]) if rr else None})
out["dbench"] = {"seconds": int(dsecs), "cache_size": dcache, "fs_size": dfs, "orders": db}
json.dump(out, open(os.path.join(d, "result.json"), "w"), indent=1)
PY
