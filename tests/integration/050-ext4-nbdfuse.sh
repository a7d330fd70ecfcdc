#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 050-ext4-nbdfuse — a real filesystem on the export: nbdfuse exposes it as
# a file, losetup makes it /dev/loopN, then mkfs.ext4, mount, write files of
# random data, umount, mount again and verify checksums, e2fsck -fn clean;
# then stop the server (SIGTERM flushes), restart it on the same backing
# file, and verify the files once more.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

nbdfuse_setup


img=$WORK/backing.img
truncate -s 512M "$img"
start_server --backing "$img" --nbd "unix:$SOCK"
attach 536870912

mkfs.ext4 -q -F -E nodiscard "$LOOP" >"$WORK/mkfs.log" 2>&1 || fail "mkfs.ext4 failed: $(cat "$WORK/mkfs.log")"
mount -t ext4 "$LOOP" "$MNT" || fail "mount failed"
mkdir "$MNT/data"
# Files from a few KiB to 24 MiB, plus one written in many small appends.
sizes=(4096 12345 65536 1048576 3000000 8388608 16777216 25165824)
for i in "${!sizes[@]}"; do
  head -c "${sizes[$i]}" /dev/urandom >"$MNT/data/f$i"
done
for i in $(seq 200); do head -c 4000 /dev/urandom; done >"$MNT/data/appended"
mkdir -p "$MNT/data/many"
for i in $(seq 300); do head -c $((i * 37)) /dev/urandom >"$MNT/data/many/s$i"; done
(cd "$MNT/data" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$WORK/sums"
sync
# fstrim sends TRIM through loop → FUSE → NBD for the free space.
fstrim -v "$MNT" >/dev/null 2>&1 || log "fstrim not supported through this loop/FUSE stack"
verify_files "before umount"
umount "$MNT"

# Drop cached pages so the second mount really reads through the server.
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
mount -t ext4 "$LOOP" "$MNT" || fail "second mount failed"
verify_files "after remount"
rm -f "$MNT/data/f3"
head -c 5000000 /dev/urandom >"$MNT/data/f3"
(cd "$MNT/data" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$WORK/sums"
umount "$MNT"
out=$(e2fsck -fn "$LOOP" 2>&1) || fail "e2fsck -fn reports problems: $out"
detach
server_alive "after the filesystem run"
stop_server

# The backing file alone holds the filesystem after a clean stop.
out=$(e2fsck -fn "$img" 2>&1) || fail "e2fsck -fn on the backing file after SIGTERM: $out"

start_server --backing "$img" --nbd "unix:$SOCK"
attach 536870912
mount -t ext4 -o ro "$LOOP" "$MNT" || fail "mount after server restart failed"
verify_files "after server restart"
umount "$MNT"
detach
stop_server
