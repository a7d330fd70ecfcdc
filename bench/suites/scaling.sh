#!/usr/bin/env bash
# scaling — the btrfs dbench thread's question (ext4 685 MB/s at 64 clients,
# 349 at 128, max latency up to 2.6 s): dbench with 1, 2, 4, … 128 clients
# on ext4 over ubcache (as it ships: writethrough, a formatted cache file and
# a formatted `sas:` backing file, served over NBD; ext4 on nbdfuse +
# losetup) and on ext4 on the cache file alone (losetup --direct-io), one
# target after the other at each client count. Throughput (MB/s) and max
# latency (ms) per point, as dbench reports them. --quick: 1, 4, 16, 64,
# 128 clients, 8 s each; else 1, 2, 4, … 128, 30 s each. Environment
# SCALE_CLIENTS, SCALE_SECONDS override.
set -euo pipefail
. "$(dirname "$0")/common.sh"

if [[ $QUICK == 1 ]]; then clients=${SCALE_CLIENTS:-1 4 16 64 128}; secs=${SCALE_SECONDS:-8}
else clients=${SCALE_CLIENTS:-1 2 4 8 16 32 64 128}; secs=${SCALE_SECONDS:-30}; fi
CACHE=$WORK/scaling-cache.img
BACKING=$WORK/scaling-backing.img
ALONE=$WORK/scaling-alone.img
SIZE=4G
tmp=$(mktemp -d "${TMPDIR:-/tmp}/scaling.XXXXXX")
MNT=$tmp/mnt FUSE_DIR=$tmp/fuse
mkdir -p "$MNT" "$FUSE_DIR"
LOOP="" SRV="" FUSE=""

cleanup() {
  set +e
  mountpoint -q "$MNT" && { timeout 60 umount "$MNT" || umount -l "$MNT"; }
  [[ -n $LOOP ]] && losetup -d "$LOOP"
  if [[ -n $FUSE ]]; then timeout 30 fusermount3 -u "$FUSE_DIR" 2>/dev/null || fusermount3 -uz "$FUSE_DIR"; wait "$FUSE" 2>/dev/null; fi
  [[ -n $SRV ]] && { kill "$SRV"; wait "$SRV" 2>/dev/null; }
  LOOP="" SRV="" FUSE=""
}
trap 'cleanup; rm -rf "$tmp"' EXIT

for f in "$CACHE" "$BACKING" "$ALONE"; do
  [[ $(stat -c %s "$f" 2>/dev/null || echo 0) == $(to_bytes $SIZE) ]] || { rm -f "$f"; fallocate -l $SIZE "$f"; }
done

# up TARGET: ext4 on TARGET (ubcache or alone), mounted at $MNT.
up() {
  if [[ $1 == ubcache ]]; then
    "$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --force >"$SUITE_DIR/format.log" 2>&1
    "$UBCACHE" serve --cache "$CACHE" --backing "sas:$BACKING" --nbd "unix:$tmp/s.sock" \
      --control "$tmp/c.ctl" >>"$SUITE_DIR/server.log" 2>&1 &
    SRV=$!
    for _ in $(seq 100); do [[ -S $tmp/s.sock ]] && break; sleep 0.1; done
    [[ -S $tmp/s.sock ]] || { echo "scaling: ubcache serve did not start" >&2; return 1; }
    nbdfuse "$FUSE_DIR/disk" --unix "$tmp/s.sock" 2>>"$SUITE_DIR/nbdfuse.log" &
    FUSE=$!
    for _ in $(seq 200); do [[ -f $FUSE_DIR/disk ]] && break; sleep 0.1; done
    LOOP=$(losetup -f --show "$FUSE_DIR/disk")
  else
    LOOP=$(losetup -f --show --direct-io=on "$ALONE")
  fi
  mkfs.ext4 -q -F -E nodiscard "$LOOP" >"$SUITE_DIR/mkfs-$1.log" 2>&1
  mount -t ext4 "$LOOP" "$MNT"
}

: >"$SUITE_DIR/points.tsv"
n=0 total=$(( $(wc -w <<<"$clients") * 2 ))
for target in ubcache alone; do
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
  cleanup
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
