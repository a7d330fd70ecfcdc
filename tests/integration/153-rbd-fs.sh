#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 153-rbd-fs — an `rbd:` backing under real clients in every configuration:
# without a cache, and with one in each cache mode (writethrough, writeback,
# writearound, none), each on its own RBD image of a one-node Ceph cluster
# (tests/ceph/cluster.sh):
#  1. qemu-io patterns: writes, write-zeroes (plain and may-unmap) read back
#     as zeros, a discard (which may read back as old data or zeros: librbd
#     skips what is not aligned to rbd_discard_granularity_bytes), every
#     neighbour intact, a flush, and all of it again on a new connection;
#  2. ext4 through nbdfuse + losetup over the same export: mkfs, files of
#     random data with checksums, umount, e2fsck -fn clean; the daemon
#     restarted (with a cache: warm), the page cache dropped, the files
#     verified, more written, umount, e2fsck -fn clean again.
# ctest: cost 200
source "$(dirname "$0")/lib.sh"

CEPH=$WORK/ceph
CONF=$("$UBCACHE_SRC/tests/ceph/cluster.sh" start "$CEPH") || fail "the Ceph cluster did not start"
on_exit "'$UBCACHE_SRC/tests/ceph/cluster.sh' stop '$CEPH'"
nbdfuse_setup
M=$((1 << 20))
SIZE=$((160 * M))  # each image; with a cache, the export is 8 KiB less

sums() { (cd "$MNT/data" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$WORK/sums"; }
fsck_clean() {
  local out
  out=$(e2fsck -fn "$LOOP" 2>&1) || fail "$1: e2fsck -fn reports problems: $out"
}

for config in nocache writethrough writeback writearound none; do
  img=$config
  rbd -c "$CONF" create "rbd/$img" --size $((SIZE / M))M || fail "rbd create rbd/$img"
  spec="rbd,conf=$CONF:rbd/$img"
  if [[ $config == nocache ]]; then
    args=(--backing "$spec" --nbd "unix:$SOCK")
  else
    cache=$WORK/cache-$config.img
    truncate -s 128M "$cache"
    "$UBCACHE" format --cache "$cache" --backing "$spec" >"$WORK/format.log" 2>&1 ||
      fail "$config: format: $(cat "$WORK/format.log")"
    args=(--cache "$cache" --backing "$spec" --cache-mode "$config" --nbd "unix:$SOCK" --control "$CTL_SOCK")
  fi
  start_server "${args[@]}"
  export_size=$(nbdinfo --size "$(nbd_uri)") || fail "$config: nbdinfo --size"

  # ---- 1. qemu-io patterns ----
  q=$((64 * M))
  qio "$config: patterns" "write -q -P 7 $q 4M" "write -q -z $((q + M)) 1M" "write -q -z -u $((q + 2 * M)) 4k" \
    "discard -q $((q + 3 * M)) 512k" "flush" "read -q -P 7 $q 1M" "read -q -P 0 $((q + M)) 1M" \
    "read -q -P 0 $((q + 2 * M)) 4k" "read -q -P 7 $((q + 2 * M + 4096)) $((M - 4096))" \
    "read -q -P 7 $((q + 3 * M + 512 * 1024)) 512k"
  qio "$config: patterns again, a new connection" "read -q -P 7 $q 1M" "read -q -P 0 $((q + M)) 1M" \
    "read -q -P 7 $((q + 3 * M + 512 * 1024)) 512k"
  qio_must_fail "$config: self-check" "read -q -P 8 $q 64k"

  # ---- 2. ext4 ----
  attach "$export_size"
  # 4 KiB blocks: a cached export takes 4 KiB-aligned requests (mke2fs picks
  # 1 KiB blocks for a device this small).
  mkfs.ext4 -q -F -b 4096 -E nodiscard "$LOOP" >"$WORK/mkfs.log" 2>&1 || fail "$config: mkfs.ext4: $(cat "$WORK/mkfs.log")"
  mount -t ext4 "$LOOP" "$MNT" || fail "$config: mount"
  mkdir -p "$MNT/data/many"
  for s in 4096 12345 65536 1048576 3000000 8388608; do head -c $s /dev/urandom >"$MNT/data/f$s"; done
  for i in $(seq 100); do head -c $((i * 41)) /dev/urandom >"$MNT/data/many/s$i"; done
  sums
  umount "$MNT"
  fsck_clean "$config: after the first files"
  detach
  stop_server
  start_server "${args[@]}"
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  attach "$export_size"
  mount -t ext4 "$LOOP" "$MNT" || fail "$config: mount after a restart"
  verify_files "$config: after a restart of the daemon"
  rm -f "$MNT/data/f3000000" "$MNT/data/many/s1"*
  head -c 4000000 /dev/urandom >"$MNT/data/f3000000"
  dd if=/dev/urandom of="$MNT/data/f8388608" bs=4k count=64 seek=100 conv=notrunc status=none
  sums
  umount "$MNT"
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  mount -t ext4 "$LOOP" "$MNT" || fail "$config: mount after rewriting"
  verify_files "$config: after rewriting"
  umount "$MNT"
  fsck_clean "$config: after rewriting"
  detach
  stop_server
  log "$config: patterns and ext4 over rbd:rbd/$img verified"
done
log "ok"
