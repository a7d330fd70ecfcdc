#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# rbd — an SSD cache in front of Ceph RBD (issue 15's rows): on a one-node
# test cluster (tests/ceph/cluster.sh: one ceph-mon, one memstore ceph-osd
# on 127.0.0.1, so "the image alone" is RAM over loopback — a fast image,
# not a real cluster's network and disks):
#   image      ubcache serve --backing rbd:rbd/plain (no cache): the image
#              alone behind the same NBD front end
#   cached     ubcache serve --cache FILE --backing rbd:rbd/cached
#              --cache-mode writeback, the working set warm in the cache
#              (written through the export, then `ctl flush`)
#   rbd bench  the cluster's own client on rbd/plain (librbd, no NBD): the
#              reference for what the cluster gives one client
# Rows: 4 KiB randread QD32 and 4 KiB randwrite QD32 (fio's nbd engine, one
# connection) over the working set; cached/image ratios per repeat, the
# configurations alternated (image, rbd bench, cached; rotated by repeat).
# Before each cached randwrite run the last one's dirty data is written
# back (ctl flush, not measured): each run starts from a clean warm cache.
# Environment: RBD_SECONDS (10; --quick 5), RBD_REPEAT (3; --quick 2),
# RBD_WS (512M; --quick 256M), RBD_CACHE_SIZE (2G; --quick 1G).
set -euo pipefail
. "$(dirname "$0")/common.sh"

FIO=${FIO:-fio}
PYTHON=${PYTHON:-python3}
if [[ $QUICK == 1 ]]; then d_s=3 d_r=2 d_ws=256M d_c=1G; else d_s=10 d_r=3 d_ws=512M d_c=2G; fi
SECONDS_PER=${RBD_SECONDS:-$d_s}
REPEAT=${RBD_REPEAT:-$d_r}
WS=${RBD_WS:-$d_ws}
CACHE_SIZE=${RBD_CACHE_SIZE:-$d_c}
for t in "$FIO" "$PYTHON" rbd ceph-mon ceph-osd; do command -v "$t" >/dev/null || { echo "rbd: $t not found" >&2; exit 2; }; done
"$FIO" --enghelp 2>/dev/null | grep -qw nbd || { echo "rbd: this fio has no nbd engine" >&2; exit 2; }
ws_bytes=$(to_bytes "$WS")
image_mib=$(( (ws_bytes >> 20) + 64 ))

bench_setup rbd
CEPH=$WORK/rbd-ceph
CACHE=$WORK/rbd-cache.img
trap 'mkdir -p "$SUITE_DIR/fio"; cp "$raw"/fio-*.json "$raw"/*.log "$raw"/*.cmd "$raw"/rbd-bench-* "$SUITE_DIR/fio/" 2>/dev/null;
      bench_cleanup; "$repo/tests/ceph/cluster.sh" stop "$CEPH" >/dev/null 2>&1 || true' EXIT

bench_progress "starting a one-node Ceph cluster (memstore) in $CEPH"
"$repo/tests/ceph/cluster.sh" stop "$CEPH" >/dev/null 2>&1 || true
rm -rf "$CEPH"
CONF=$(OSD_MEMSTORE_BYTES=$(( (2 * image_mib + 512) << 20 )) "$repo/tests/ceph/cluster.sh" start "$CEPH") ||
  die "the Ceph cluster did not start"
for img in plain cached; do rbd -c "$CONF" create "rbd/$img" --size "${image_mib}M" || die "rbd create rbd/$img"; done
sized_file "$CACHE" "$CACHE_SIZE"
"$UBCACHE" format --cache "$CACHE" --backing "rbd,conf=$CONF:rbd/cached" --force >"$raw/format.log" 2>&1 ||
  { cat "$raw/format.log" >&2; die "ubcache format failed"; }

CTL=$raw/cached.ctl
up() {  # up image|cached
  if [[ $1 == image ]]; then
    start_server image "$UBCACHE" serve --backing "rbd,conf=$CONF:rbd/plain" --nbd "unix:$raw/image.sock"
  else
    start_server cached "$UBCACHE" serve --cache "$CACHE" --backing "rbd,conf=$CONF:rbd/cached" \
      --cache-mode writeback --nbd "unix:$raw/cached.sock" --control "$CTL"
    for _ in $(seq 100); do [[ -S $CTL ]] && break; sleep 0.05; done
  fi
}

bench_progress "filling $WS of both images through the exports (sequential 1 MiB writes), flushing the cache"
for c in image cached; do
  up "$c" || die "$c: serve failed to start"
  "$FIO" --name=fill --ioengine=nbd --uri="${URI[$c]}" --rw=write --bs=1m --iodepth=8 --size="$ws_bytes" \
    --output-format=terse >"$raw/fill-$c.out" 2>&1 || { cat "$raw/fill-$c.out" >&2; die "$c: fill failed"; }
  [[ $c == cached ]] && { "$UBCACHE" ctl --control "$CTL" flush >"$raw/flush.out" 2>&1 || die "ctl flush: $(cat "$raw/flush.out")"; }
  stop_server "$c"
done

common=(--bs=4k --iodepth=32 --time_based --runtime="$SECONDS_PER" --randrepeat=0 --norandommap
        --size="$ws_bytes" --lat_percentiles=1 --percentile_list=50:99 --output-format=json)
fio_run() {  # fio_run CONFIG OP REPEAT
  local c=$1 op=$2 r=$3 tag="$1-$2-$3"
  bench_progress "repeat $r/$REPEAT: $c, 4 KiB $op QD32, ${SECONDS_PER} s"
  echo "$FIO --name=$tag --rw=$op ${common[*]} --ioengine=nbd --uri=${URI[$c]}" >"$raw/fio-$tag.cmd"
  measured "$tag" "${PID[$c]:-}" "$FIO" --name="$tag" --rw="$op" "${common[@]}" --ioengine=nbd --uri="${URI[$c]}" \
    --output="$raw/fio-$tag.json" >"$raw/fio-$tag.err" 2>&1 ||
    { echo "rbd: fio $tag failed:" >&2; cat "$raw/fio-$tag.err" >&2; failures=$((failures + 1)); }
}
rbd_bench() {  # rbd_bench OP REPEAT: rbd bench on rbd/plain, about SECONDS_PER s at the image's last rate
  local op=$1 r=$2 tag="rbd-bench-$1-$2" total
  total=$(( ${RBD_BENCH_OPS:-20000} * 4096 ))
  bench_progress "repeat $r/$REPEAT: rbd bench --io-type $op, 4 KiB, 32 threads, rand, $((total >> 20)) MiB"
  echo "rbd -c $CONF bench --io-type $op --io-size 4096 --io-threads 32 --io-total $total --io-pattern rand rbd/plain" \
    >"$raw/$tag.cmd"
  rbd -c "$CONF" bench --io-type "$op" --io-size 4096 --io-threads 32 --io-total "$total" --io-pattern rand \
    rbd/plain >"$raw/$tag.out" 2>&1 || { echo "rbd: $tag failed:" >&2; cat "$raw/$tag.out" >&2; failures=$((failures + 1)); }
}

"$UBCACHE" ctl --control "$CTL" --json show >/dev/null 2>&1 || true
configs=(image bench cached)
for ((r = 1; r <= REPEAT; r++)); do
  k=${#configs[@]}
  for ((i = 0; i < k; i++)); do
    c=${configs[$(( (i + r - 1) % k ))]}
    if [[ $c == bench ]]; then
      rbd_bench read "$r"
      rbd_bench write "$r"
      continue
    fi
    up "$c" || { failures=$((failures + 1)); continue; }
    [[ $c == cached ]] && "$UBCACHE" ctl --control "$CTL" --json show >"$raw/show-$r-0.json" 2>/dev/null
    fio_run "$c" randread "$r"
    if [[ $c == cached ]]; then
      # Each repeat's writes land in a clean warm cache: the last repeat's
      # dirty data is written back first (not measured).
      "$UBCACHE" ctl --control "$CTL" flush >"$raw/flush-$r.out" 2>&1 || { cat "$raw/flush-$r.out" >&2; failures=$((failures + 1)); }
    fi
    fio_run "$c" randwrite "$r"
    [[ $c == cached ]] && "$UBCACHE" ctl --control "$CTL" --json show >"$raw/show-$r-1.json" 2>/dev/null
    running "$c" || true
    stop_server "$c"
  done
done

versions="$("$FIO" --version); $(rbd --version | head -1)"
PYTHONPATH="$bench" "$PYTHON" - "$raw" "$SUITE_DIR/result.json" "$REPEAT" "$SECONDS_PER" "$ws_bytes" "$versions" <<'PY' ||
import json, re, statistics, sys
from benchlib import load

raw, dst, repeat, seconds, ws, versions = sys.argv[1:]
repeat = int(repeat)
bad = 0

def fio(c, op, r):
    global bad
    j = load(f"{raw}/fio-{c}-{op}-{r}.json", "rbd")
    if not j or not j.get("jobs") or j["jobs"][0].get("error"):
        bad += 1
        return None
    d = j["jobs"][0]["read" if op == "randread" else "write"]
    p = d.get("lat_ns", {}).get("percentile", {})
    return {"iops": d["iops"], "p50_us": p.get("50.000000", 0) / 1e3, "p99_us": p.get("99.000000", 0) / 1e3}

def bench(op, r):
    global bad
    try:
        text = open(f"{raw}/rbd-bench-{op}-{r}.out").read()
    except OSError:
        bad += 1
        return None
    m = re.findall(r"elapsed:\s*([\d.]+)\s+ops:\s*(\d+)\s+ops/sec:\s*([\d.]+)", text)
    if not m:
        bad += 1
        return None
    return {"iops": float(m[-1][2]), "ops": int(m[-1][1]), "elapsed_s": float(m[-1][0])}

def hits(r):
    a, b = load(f"{raw}/show-{r}-0.json", "rbd"), load(f"{raw}/show-{r}-1.json", "rbd")
    if not a or not b:
        return None
    dh = b.get("stats_total/cache_hits", 0) - a.get("stats_total/cache_hits", 0)
    dm = b.get("stats_total/cache_misses", 0) - a.get("stats_total/cache_misses", 0)
    return 100.0 * dh / (dh + dm) if dh + dm else None

def summary(v):
    v = [x for x in v if x is not None]
    return {"median": statistics.median(v) if v else None, "range": [min(v), max(v)] if v else None, "runs": v}

rows = {}
for op in ("randread", "randwrite"):
    img = [fio("image", op, r) for r in range(1, repeat + 1)]
    cac = [fio("cached", op, r) for r in range(1, repeat + 1)]
    bop = "read" if op == "randread" else "write"
    rb = [bench(bop, r) for r in range(1, repeat + 1)]
    rows[op] = {
        "image_iops": summary([x and x["iops"] for x in img]),
        "cached_iops": summary([x and x["iops"] for x in cac]),
        "rbd_bench_iops": summary([x and x["iops"] for x in rb]),
        "image_p99_us": summary([x and x["p99_us"] for x in img]),
        "cached_p99_us": summary([x and x["p99_us"] for x in cac]),
        "ratio_cached_over_image": summary([c["iops"] / i["iops"] for c, i in zip(cac, img) if c and i and i["iops"]]),
        "ratio_cached_over_rbd_bench": summary([c["iops"] / b["iops"] for c, b in zip(cac, rb) if c and b and b["iops"]]),
    }
doc = {"config": {"repeat": repeat, "seconds": int(seconds), "ws_bytes": int(ws), "versions": versions,
                  "cluster": "tests/ceph/cluster.sh: 1 ceph-mon + 1 memstore ceph-osd on 127.0.0.1 (RAM, loopback)",
                  "fio": "--bs=4k --iodepth=32 --randrepeat=0 --norandommap, fio's nbd engine, one connection",
                  "rbd_bench": "rbd bench --io-size 4096 --io-threads 32 --io-pattern rand on rbd/plain",
                  "order": "per repeat: image, rbd bench, cached, rotated by one per repeat",
                  "cached_randwrite": "each run starts after ctl flush: a clean warm cache, writeback mode"},
       "rows": rows, "cached_read_hit_pct": [hits(r) for r in range(1, repeat + 1)]}
json.dump(doc, open(dst, "w"), indent=2)
sys.exit(1 if bad else 0)
PY
  failures=$((failures + 1))
bench_finish
