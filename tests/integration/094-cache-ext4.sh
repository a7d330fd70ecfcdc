#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 094-cache-ext4 — ext4 on a cached export (serve --cache, writethrough and
# then writearound): nbdfuse exposes the export as a file, losetup makes it
# /dev/loopN; mkfs.ext4, mount, write files of random data (with
# checksums), umount, e2fsck -fn clean; drop the page cache, mount again
# and verify (now partly from the cache), rewrite some files over cached
# blocks, umount, e2fsck; restart the server on the same cache and backing
# files (cold index over old cache contents), mount, verify twice (misses,
# then hits), umount, e2fsck clean. The statistics must show cache hits.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

nbdfuse_setup


CACHE=$WORK/cache.img
img=$WORK/backing.img
truncate -s 256M "$CACHE"
truncate -s 512M "$img"

sums() { (cd "$MNT/data" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$WORK/sums"; }

fsck_clean() {
  local out
  out=$(e2fsck -fn "$LOOP" 2>&1) || fail "$1: e2fsck -fn reports problems: $out"
}

# hits_of — cache_hits in the last server log.
hits_of() {
  local line
  line=$(grep -E "export 'ubcache': cache_hits" "$SERVER_LOG" | tail -n 1) ||
    fail "no statistics line in $SERVER_LOG"
  log "stats: ${line#*export }"
  sed -E 's/.*cache_hits ([0-9]+) .*/\1/' <<<"$line"
}

serve() { start_server --cache "$CACHE" --backing "$img" --nbd "unix:$SOCK" --cache-mode "$1"; }

# ---- writethrough: make the filesystem and the files ----
serve writethrough
attach 536870912
mkfs.ext4 -q -F -E nodiscard "$LOOP" >"$WORK/mkfs.log" 2>&1 || fail "mkfs.ext4 failed: $(cat "$WORK/mkfs.log")"
mount -t ext4 "$LOOP" "$MNT" || fail "mount failed"
mkdir "$MNT/data"
sizes=(4096 12345 65536 1048576 3000000 8388608 16777216)
for i in "${!sizes[@]}"; do
  head -c "${sizes[$i]}" /dev/urandom >"$MNT/data/f$i"
done
for i in $(seq 200); do head -c 4000 /dev/urandom; done >"$MNT/data/appended"
mkdir -p "$MNT/data/many"
for i in $(seq 300); do head -c $((i * 37)) /dev/urandom >"$MNT/data/many/s$i"; done
sums
sync
verify_files "before umount"
umount "$MNT"
fsck_clean "writethrough, after the file workload"

# Drop cached pages so the second mount really reads through the server.
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
mount -t ext4 "$LOOP" "$MNT" || fail "second mount failed"
verify_files "after remount"
# Rewrite files whose blocks are in the cache; delete, trim, write anew.
rm -f "$MNT/data/f3" "$MNT/data/many/s1"*
head -c 5000000 /dev/urandom >"$MNT/data/f3"
dd if=/dev/urandom of="$MNT/data/f5" bs=4k count=100 seek=50 conv=notrunc status=none
sync
fstrim "$MNT" >/dev/null 2>&1 || log "fstrim not supported through this loop/FUSE stack"
for i in $(seq 20); do head -c $((i * 10000)) /dev/urandom >"$MNT/data/many/n$i"; done
sums
umount "$MNT"
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
mount -t ext4 "$LOOP" "$MNT" || fail "third mount failed"
verify_files "after rewriting cached files"
umount "$MNT"
fsck_clean "writethrough, after rewriting"
detach
server_alive "after the filesystem run"
stop_server
h=$(hits_of)
((h > 0)) || fail "writethrough: no cache hits in the whole filesystem run"
out=$(e2fsck -fn "$img" 2>&1) || fail "e2fsck -fn on the backing file after SIGTERM: $out"

# ---- restart in writearound: verify, change files, verify ----
serve writearound
attach 536870912
fsck_clean "after restart"
mount -t ext4 "$LOOP" "$MNT" || fail "mount after server restart failed"
verify_files "after server restart"
umount "$MNT"
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
mount -t ext4 "$LOOP" "$MNT" || fail "mount after server restart (2) failed"
verify_files "after server restart, again (from the cache)"
# writearound: writes go around the cache and invalidate cached copies.
head -c 2000000 /dev/urandom >"$MNT/data/f4"
dd if=/dev/urandom of="$MNT/data/f6" bs=4k count=64 seek=1000 conv=notrunc status=none
sums
umount "$MNT"
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
mount -t ext4 "$LOOP" "$MNT" || fail "mount after writearound writes failed"
verify_files "after writearound writes"
umount "$MNT"
fsck_clean "writearound"
detach
stop_server
h=$(hits_of)
((h > 0)) || fail "writearound: re-reading the filesystem got no cache hits"

# ---- restart once more (writethrough): everything intact ----
serve writethrough
attach 536870912
fsck_clean "after the second restart"
mount -t ext4 -o ro "$LOOP" "$MNT" || fail "mount after the second restart failed"
verify_files "after the second restart"
umount "$MNT"
detach
stop_server
out=$(e2fsck -fn "$img" 2>&1) || fail "e2fsck -fn on the backing file at the end: $out"
