#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scaling — the btrfs dbench thread's question (ext4 685 MB/s at 64 clients,
# 349 at 128, max latency up to 2.6 s): dbench with 1, 2, 4, … 128 clients
# on ext4 over ubcache (as it ships: writethrough, a formatted cache file and
# a formatted `sas:` backing file, served over NBD; ext4 on nbdfuse +
# losetup) and on ext4 on the cache file alone (losetup --direct-io), one
# target after the other at each client count. Throughput (MB/s) and max
# latency (ms) per point, as dbench reports them. ubcache runs in each of
# SCALE_MODES (default: writethrough, as it ships, and writeback: past ~64
# clients dbench's dirty data outgrows the page cache and its writes become
# the spindle's in writethrough). --quick: 1, 16, 128 clients, 8 s
# each; else 1, 2, 4, … 128, 30 s each. Environment SCALE_CLIENTS,
# SCALE_SECONDS override; SCALE_SERVE_ARGS adds serve flags. Then
# SCALE_PAIRS (3; 0 with --quick) fresh-start pairs per target: its best
# count below the largest in the sweep, then the largest; the verdict is
# their median ratio.
# The cache is twice the filesystem (SCALE_CACHE_SIZE, default 8G): in
# writeback, dirty data past cutoff_writeback (40 % of the cache) goes
# write-through at the spindle's latency, and dbench's 128 clients write
# ~1.3 GB of live files in their first seconds on top of what the smaller
# counts left dirty (ext4 without discard frees nothing in the cache). A
# 4G cache measures the spindle behind that cutoff, not client scaling.
set -euo pipefail
. "$(dirname "$0")/common.sh"

if [[ $QUICK == 1 ]]; then clients=${SCALE_CLIENTS:-1 16 128}; secs=${SCALE_SECONDS:-8}
else clients=${SCALE_CLIENTS:-1 2 4 8 16 32 64 128}; secs=${SCALE_SECONDS:-30}; fi
CACHE=$WORK/scaling-cache.img
BACKING=$WORK/scaling-backing.img
ALONE=$WORK/scaling-alone.img
SIZE=4G
fs_setup
CACHE_SIZE=${SCALE_CACHE_SIZE:-8G}
sized_file "$CACHE" "$CACHE_SIZE"
for f in "$BACKING" "$ALONE"; do sized_file "$f" $SIZE; done

modes=${SCALE_MODES:-writethrough writeback}

# up TARGET: ext4 on TARGET (ubcache-MODE or alone), mounted at $MNT.
up() {
  if [[ $1 == ubcache-* ]]; then
    "$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --force >"$SUITE_DIR/format.log" 2>&1
    serve_up "$SUITE_DIR/server-$1.log" --cache "$CACHE" --backing "sas:$BACKING" \
      --cache-mode "${1#ubcache-}" ${SCALE_SERVE_ARGS:-}
    fs_up_export
  else
    fs_up_file "$ALONE"
  fi
  fs_mkfs "$SUITE_DIR/mkfs-$1.log"
}

# written: bytes the loop device under ext4 has written (what reaches
# ubcache's export, or the cache file alone), from its stat.
written() { awk '{print $7 * 512}' "/sys/block/${LOOP#/dev/}/stat"; }
# ubcache_get TARGET NAME: a ctl attribute of ubcache's targets; empty for alone.
ubcache_get() { [[ $1 == ubcache-* ]] && ctl get "$2" 2>/dev/null || true; }

: >"$SUITE_DIR/points.tsv"
: >"$SUITE_DIR/pairs.tsv"
targets="$(printf 'ubcache-%s ' $modes)alone"
largest=$(tr ' ' '\n' <<<"$clients" | sort -n | tail -n 1)
pairs=${SCALE_PAIRS:-$([[ $QUICK == 1 ]] && echo 0 || echo 3)}
n=0 total=$(( $(wc -w <<<"$clients") * $(wc -w <<<"$targets") + pairs * 2 * $(wc -w <<<"$targets") ))

# point TARGET CLIENTS TSV LABEL: one dbench run on the mounted target, a
# line in TSV (target, clients, MB/s, max latency, device writes MB/s,
# writes turned away by the cutoff, dirty bytes after).
point() {
  local target=$1 c=$2 tsv=$3 label=$4 out line mbs lat w0 t0 cw0 cw1 wmbs dirty cwt
  n=$((n + 1))
  bench_progress "$target: dbench $c client(s), $secs s${label:+, $label} ($n/$total)"
  rm -rf "$MNT/clients"
  out=$SUITE_DIR/dbench-$target-$c${label:+-${label// /-}}.txt
  w0=$(written) t0=$(date +%s.%N) cw0=$(ubcache_get "$target" cutoff_writethroughs)
  dbench -D "$MNT" -t "$secs" -c /usr/share/dbench/client.txt "$c" >"$out" 2>&1 || { echo "scaling: dbench $c on $target failed: $(tail -n 3 "$out")" >&2; exit 1; }
  line=$(grep -E '^Throughput' "$out" | tail -n 1)
  [[ -n $line ]] || { echo "scaling: no Throughput line in $out" >&2; exit 1; }
  mbs=$(awk '{print $2}' <<<"$line"); lat=$(grep -oE 'max_latency=[0-9.]+' <<<"$line" | cut -d= -f2)
  wmbs=$(awk -v w0="$w0" -v w1="$(written)" -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN{printf "%.1f", (w1-w0)/(t1-t0)/1e6}')
  cw1=$(ubcache_get "$target" cutoff_writethroughs) dirty=$(ubcache_get "$target" dirty_data)
  cwt=""; [[ -n $cw0 && -n $cw1 ]] && cwt=$((cw1 - cw0))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$c" "$mbs" "${lat:-}" "$wmbs" "$cwt" "$dirty" >>"$tsv"
  echo "scaling: $target $c clients${label:+ ($label)}: $mbs MB/s, max latency ${lat:-?} ms; device writes $wmbs MB/s${cwt:+, $cwt written through at the cutoff}${dirty:+, dirty $dirty bytes}"
}

# The sweep: each target formatted once, every client count in turn.
for target in $targets; do
  up "$target"
  for c in $clients; do point "$target" "$c" "$SUITE_DIR/points.tsv" ""; done
  rm -rf "$MNT/clients"
  fs_down
done

# The verdict's pairs: one 30 s point per count scatters by ±15 % here, more
# than the 0.9 being judged. Each pair starts fresh (formatted, mkfs), runs
# the target's best smaller count from the sweep, then the largest; the targets
# take turns, pair by pair, so drift touches them alike.
for ((r = 1; r <= pairs; r++)); do
  for target in $targets; do
    # The best of the smaller counts: the question is whether the largest
    # holds up against it (a sweep that peaked at the largest says yes).
    peak=$(awk -F'\t' -v t="$target" -v l="$largest" '$1 == t && $2 != l && $3 > best { best = $3; c = $2 } END { print c }' "$SUITE_DIR/points.tsv")
    [[ -n $peak ]] || { echo "scaling: SCALE_PAIRS needs two client counts or more" >&2; exit 2; }
    up "$target"
    point "$target" "$peak" "$SUITE_DIR/pairs.tsv" "pair $r, peak"
    point "$target" "$largest" "$SUITE_DIR/pairs.tsv" "pair $r, largest"
    rm -rf "$MNT/clients"
    fs_down
  done
done

"${PYTHON:-python3}" - "$SUITE_DIR" "$secs" "$SIZE" "$CACHE_SIZE" <<'PY'
import json, os, sys
d, secs, size, cache_size = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
pts = {}
for line in open(os.path.join(d, "points.tsv")):
    t, c, mbs, lat, wmbs, cwt, dirty = line.rstrip("\n").split("\t")
    pts.setdefault(t, []).append({"clients": int(c), "mb_s": float(mbs), "max_latency_ms": float(lat) if lat else None,
                                  "device_write_mb_s": float(wmbs) if wmbs else None,
                                  "cutoff_writethroughs": int(cwt) if cwt else None,
                                  "dirty_bytes_after": int(dirty) if dirty else None})
pairs = {}
rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "pairs.tsv"))]
for a, b in zip(rows[0::2], rows[1::2]):  # (peak, largest) per target and round
    pairs.setdefault(a[0], []).append({"peak_clients": int(a[1]), "peak_mb_s": float(a[2]),
                                       "largest_clients": int(b[1]), "largest_mb_s": float(b[2]),
                                       "largest_max_latency_ms": float(b[3]) if b[3] else None,
                                       "largest_cutoff_writethroughs": int(b[5]) if b[5] else None})
json.dump({"seconds": secs, "fs_size": size, "cache_size": cache_size, "targets": pts, "pairs": pairs}, open(os.path.join(d, "result.json"), "w"), indent=2)
PY
