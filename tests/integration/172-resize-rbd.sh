#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 172-resize-rbd — an rbd: image resized by another client (`rbd resize`)
# under a running daemon grows its export on its own, with no ctl call
# (issue 31 item 3; the image's header watch, backend/rbd_device.h), against
# a real one-node Ceph (tests/ceph/cluster.sh), formatted cache, writeback:
#  1. `rbd resize` from 64 MiB to 128 MiB: within seconds nbdinfo gives the
#     new size and the daemon logs the growth; `ctl resize` then says
#     "unchanged";
#  2. data written past the old end through the cache (kept dirty: writeback
#     paused) reads back byte-exact, and so does the data before it;
#  3. after a restart: the new size and the same bytes; once `ctl flush` has
#     written them back, `rbd export` holds them at data_offset + offset;
#  4. `rbd resize --allow-shrink` to 96 MiB is refused by the daemon (a
#     warning saying shrinking is not supported) and the export keeps its
#     size.
# ctest: cost 150
source "$(dirname "$0")/lib.sh"

CEPH=$WORK/ceph
CONF=$("$UBCACHE_SRC/tests/ceph/cluster.sh" start "$CEPH") || fail "the Ceph cluster did not start"
on_exit "'$UBCACHE_SRC/tests/ceph/cluster.sh' stop '$CEPH'"
rbdc() { rbd -c "$CONF" "$@"; }
M=$((1 << 20))
DATA_OFFSET=8192
IMG="rbd,conf=$CONF:rbd/grow"
CACHE=$WORK/cache.img
OLD_SIZE=$((64 * M - DATA_OFFSET)) NEW_SIZE=$((128 * M - DATA_OFFSET))

rbdc create rbd/grow --size 64M || fail "rbd create"
truncate -s 256M "$CACHE"
"$UBCACHE" format --cache "$CACHE" --backing "$IMG" >"$WORK/format.log" 2>&1 ||
  fail "format: $(cat "$WORK/format.log")"
random_file "$WORK/old.bin" 8
random_file "$WORK/new.bin" 16

serve() {
  start_server --cache "$CACHE" --backing "$IMG" --cache-mode writeback --nbd "unix:$SOCK" \
    --control "$CTL_SOCK" --set writeback_running=0
}
# wait_size WANT WHAT — nbdinfo's size becomes WANT within 30 s.
wait_size() {
  local deadline=$((SECONDS + 30)) got
  while got=$(nbd_size) && [[ $got != "$1" ]]; do
    ((SECONDS < deadline)) || fail "$2: nbdinfo size $got, want $1 (log: $(grep -i 'resiz\|grown' "$SERVER_LOG"))"
    sleep 0.2
  done
}

serve
[[ $(nbd_size) == "$OLD_SIZE" ]] || fail "before: nbdinfo size $(nbd_size), want $OLD_SIZE"
nbd_put "$WORK/old.bin" 0

# ---- 1. rbd resize: followed with no ctl call ----
rbdc resize rbd/grow --size 128M >"$WORK/resize.out" 2>&1 || fail "rbd resize: $(cat "$WORK/resize.out")"
t0=$SECONDS
wait_size "$NEW_SIZE" "after rbd resize"
log "the export grew $((SECONDS - t0)) s after rbd resize"
grep -q "the image was resized from 64 MiB to 128 MiB" "$SERVER_LOG" || fail "the log does not say the image was resized"
grep -q "ubcache: grown from 64.0 MiB to 128 MiB" "$SERVER_LOG" || fail "the log does not say the export grew"
out=$(ctl resize) || fail "ctl resize after the automatic growth exited $?: $out"
expect_contains "$out" "unchanged" "ctl resize after the automatic growth"

# ---- 2. past the old end ----
grown_write "$WORK/old.bin" "$WORK/new.bin" $((72 * M))

# ---- 3. restart, write back, rbd export ----
grown_restart_flush "$NEW_SIZE" "$WORK/old.bin" "$WORK/new.bin" $((72 * M))
rbdc export rbd/grow "$WORK/export.img" >/dev/null 2>&1 || fail "rbd export"
[[ $(stat -c %s "$WORK/export.img") == $((128 * M)) ]] || fail "rbd export: $(stat -c %s "$WORK/export.img") bytes"
cmp -s <(dd if="$WORK/export.img" bs=1M skip=$((72 * M + DATA_OFFSET)) count=16 iflag=skip_bytes status=none) \
  "$WORK/new.bin" || fail "the image does not hold the data written past the old end"
cmp -s <(dd if="$WORK/export.img" bs=1M skip=$DATA_OFFSET count=8 iflag=skip_bytes status=none) \
  "$WORK/old.bin" || fail "the image does not hold the data written before the old end"

# ---- 4. shrinking is refused ----
rbdc resize rbd/grow --size 96M --allow-shrink >"$WORK/shrink.out" 2>&1 || fail "rbd resize --allow-shrink: $(cat "$WORK/shrink.out")"
deadline=$((SECONDS + 30))
until grep -q "shrinking is not supported" "$SERVER_LOG"; do
  ((SECONDS < deadline)) || fail "no refusal logged after the image shrank"
  sleep 0.2
done
[[ $(nbd_size) == "$NEW_SIZE" ]] || fail "a refused shrink changed the size: $(nbd_size)"
server_alive "the image shrank"
rbdc resize rbd/grow --size 128M >/dev/null 2>&1 || fail "rbd resize back to 128M"
stop_server
