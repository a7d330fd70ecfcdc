#!/usr/bin/env bash
# 050-ext4-nbdfuse — a real filesystem on the export: nbdfuse exposes it as
# a file, losetup makes it /dev/loopN, then mkfs.ext4, mount, write files of
# random data, umount, mount again and verify checksums, e2fsck -fn clean;
# then stop the server (SIGTERM flushes), restart it on the same backing
# file, and verify the files once more.
source "$(dirname "$0")/lib.sh"

FUSE_DIR=$WORK/fuse
MNT=$WORK/mnt
mkdir -p "$FUSE_DIR" "$MNT"
LOOP=""
FUSE_PID=""

attach() {
  rm -f "$WORK/nbdfuse.pid"
  nbdfuse -P "$WORK/nbdfuse.pid" "$FUSE_DIR/disk" --unix "$SERVER_SOCK" 2>"$WORK/nbdfuse.log" &
  FUSE_PID=$!
  local deadline=$((SECONDS + 20))
  until [[ -s $WORK/nbdfuse.pid && -f $FUSE_DIR/disk ]]; do
    kill -0 "$FUSE_PID" 2>/dev/null || fail "nbdfuse exited: $(cat "$WORK/nbdfuse.log")"
    ((SECONDS < deadline)) || fail "nbdfuse did not become ready in 20s: $(cat "$WORK/nbdfuse.log")"
    sleep 0.1
  done
  local size
  size=$(stat -c %s "$FUSE_DIR/disk")
  [[ $size == "$1" ]] || fail "nbdfuse file is $size bytes, expected $1"
  LOOP=$(losetup -f --show "$FUSE_DIR/disk") || fail "losetup on the nbdfuse file failed"
  log "attached $LOOP"
}

detach() {
  # timeout: a hung server must not hang the cleanup of a failed run.
  if mountpoint -q "$MNT"; then timeout 30 umount "$MNT" || umount -l "$MNT"; fi
  if [[ -n $LOOP ]]; then losetup -d "$LOOP" || true; LOOP=""; fi
  if [[ -n $FUSE_PID ]]; then
    timeout 30 fusermount3 -u "$FUSE_DIR" 2>/dev/null || fusermount3 -uz "$FUSE_DIR" 2>/dev/null || true
    local i
    for i in $(seq 100); do kill -0 "$FUSE_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$FUSE_PID" 2>/dev/null || true
    wait "$FUSE_PID" 2>/dev/null || true
    FUSE_PID=""
  fi
}
on_exit detach

verify_files() {
  (cd "$MNT/data" && sha256sum --quiet -c "$WORK/sums") ||
    fail "$1: file checksums differ"
}

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
