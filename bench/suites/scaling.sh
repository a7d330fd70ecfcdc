#!/usr/bin/env bash
# scaling — the btrfs dbench thread's question (ext4 685 MB/s at 64 clients,
# 349 at 128, max latency up to 2.6 s): dbench with 1, 2, 4, … 128 clients
# on ext4 over ubcache (as it ships: writethrough, a formatted cache file and
# a formatted `sas:` backing file, served over NBD; ext4 on nbdfuse +
# losetup) and on ext4 on the cache file alone (losetup --direct-io), one
# target after the other at each client count. Throughput (MB/s) and max
# latency (ms) per point, as dbench reports them. ubcache runs in each of
# SCALE_MODES (default: writethrough, as it ships, and writeback: past ~64
# clients dbench's dirty data outgrows the page cache and its writes become
# the spindle's in writethrough). --quick: 1, 4, 16, 64, 128 clients, 8 s
# each; else 1, 2, 4, … 128, 30 s each. Environment SCALE_CLIENTS,
# SCALE_SECONDS override; SCALE_SERVE_ARGS adds serve flags.
set -euo pipefail
. "$(dirname "$0")/common.sh"

if [[ $QUICK == 1 ]]; then clients=${SCALE_CLIENTS:-1 4 16 64 128}; secs=${SCALE_SECONDS:-8}
else clients=${SCALE_CLIENTS:-1 2 4 8 16 32 64 128}; secs=${SCALE_SECONDS:-30}; fi
CACHE=$WORK/scaling-cache.img
BACKING=$WORK/scaling-backing.img
ALONE=$WORK/scaling-alone.img
SIZE=4G
fs_setup
for f in "$CACHE" "$BACKING" "$ALONE"; do sized_file "$f" $SIZE; done

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

: >"$SUITE_DIR/points.tsv"
targets="$(printf 'ubcache-%s ' $modes)alone"
n=0 total=$(( $(wc -w <<<"$clients") * $(wc -w <<<"$targets") ))
for target in $targets; do
  up "$target"
  for c in $clients; do
    n=$((n + 1))
    bench_progress "$target: dbench $c client(s), $secs s ($n/$total)"
    rm -rf "$MNT/clients"
    out=$SUITE_DIR/dbench-$target-$c.txt
    dbench -D "$MNT" -t "$secs" -c /usr/share/dbench/client.txt "$c" >"$out" 2>&1 || { echo "scaling: dbench $c on $target failed: $(tail -n 3 "$out")" >&2; exit 1; }
    line=$(grep -E '^Throughput' "$out" | tail -n 1)
    [[ -n $line ]] || { echo "scaling: no Throughput line in $out" >&2; exit 1; }
    mbs=$(awk '{print $2}' <<<"$line"); lat=$(grep -oE 'max_latency=[0-9.]+' <<<"$line" | cut -d= -f2)
    printf '%s\t%s\t%s\t%s\n' "$target" "$c" "$mbs" "${lat:-}" >>"$SUITE_DIR/points.tsv"
    echo "scaling: $target $c clients: $mbs MB/s, max latency ${lat:-?} ms"
  done
  rm -rf "$MNT/clients"
  fs_down
done

"${PYTHON:-python3}" - "$SUITE_DIR" "$secs" "$SIZE" <<'PY'
import json, os, sys
d, secs, size = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pts = {}
for line in open(os.path.join(d, "points.tsv")):
    t, c, mbs, lat = line.rstrip("\n").split("\t")
    pts.setdefault(t, []).append({"clients": int(c), "mb_s": float(mbs), "max_latency_ms": float(lat) if lat else None})
json.dump({"seconds": secs, "fs_size": size, "targets": pts}, open(os.path.join(d, "result.json"), "w"), indent=2)
PY
