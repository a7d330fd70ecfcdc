#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 171-resize-file — growing a backing file under a running daemon (issue 31
# item 3), with a formatted cache in writeback:
#  A. the backing file grows (truncate); `ctl resize` says "grown from ... to
#     ..." and nbdinfo (NBD_OPT_INFO/GO on a new connection) sees the new
#     size; a second `ctl resize` says "unchanged"; a connection opened
#     before the resize keeps the size it was given.
#  B. data written past the old end through the cache (nbdsh, writeback
#     paused so it stays dirty in the cache) reads back byte-exact, and so
#     does the data before the old end;
#  C. after a restart the export has the new size and the same bytes (read
#     from the cache: still dirty), and once `ctl flush` has written it back
#     the backing file holds them at data_offset + offset;
#  D. a backing file that shrank is refused: `ctl resize` exits 1 with one
#     line saying shrinking is not supported, and the export keeps its size.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

M=$((1 << 20))
DATA_OFFSET=8192  # ubcache format's default data_offset (16 sectors)
format_cache_backing 256M 64M
random_file "$WORK/old.bin" 8     # at 0, inside the old size
random_file "$WORK/new.bin" 16    # at 72 MiB, past the old end
OLD_SIZE=$((64 * M - DATA_OFFSET)) NEW_SIZE=$((128 * M - DATA_OFFSET))

serve() {
  start_server --cache "$CACHE" --backing "$BACKING" --cache-mode writeback --nbd "unix:$SOCK" \
    --control "$CTL_SOCK" --set writeback_running=0
}
serve
[[ $(nbd_size) == "$OLD_SIZE" ]] || fail "before: nbdinfo size $(nbd_size), want $OLD_SIZE"
nbd_put "$WORK/old.bin" 0

# A connection made before the resize: the size it negotiated is its own,
# and it goes on working across the resize.
mkfifo "$WORK/early.in"
exec 7<>"$WORK/early.in"
on_exit "exec 7>&- 2>/dev/null || true"
nbdsh -u "$(nbd_uri)" -c "
import sys
print(h.get_size(), flush=True)
sys.stdin.readline()
h.pread(4096, h.get_size() - 4096)
print('read ok', flush=True)" <&7 >"$WORK/early.out" 2>&1 &
EARLY=$!
on_exit "kill $EARLY 2>/dev/null || true"
for _ in $(seq 100); do [[ -s $WORK/early.out ]] && break; sleep 0.1; done
[[ $(head -n 1 "$WORK/early.out") == "$OLD_SIZE" ]] || fail "early connection: $(cat "$WORK/early.out")"

# ---- A: grow ----
truncate -s 128M "$BACKING"
out=$(ctl resize) || fail "ctl resize exited $?: $out"
expect_contains "$out" "grown from 64.0 MiB" "ctl resize"
expect_contains "$out" "($NEW_SIZE bytes)" "ctl resize"
[[ $(nbd_size) == "$NEW_SIZE" ]] || fail "after ctl resize: nbdinfo size $(nbd_size), want $NEW_SIZE"
out=$(ctl resize) || fail "a second ctl resize exited $?: $out"
expect_contains "$out" "unchanged" "a second ctl resize"
echo >&7
wait "$EARLY" || fail "the connection made before the resize failed: $(cat "$WORK/early.out")"
[[ $(tail -n 1 "$WORK/early.out") == "read ok" ]] || fail "early connection: $(cat "$WORK/early.out")"
grep -q "grown from" "$SERVER_LOG" || fail "the daemon's log does not say it grew"

# ---- B: write past the old end, read back ----
grown_write "$WORK/old.bin" "$WORK/new.bin" $((72 * M))
# The end of the grown range is addressable; one block past it is not.
nbdsh -u "$(nbd_uri)" -c "h.pread(4096, $NEW_SIZE - 4096)" || fail "reading the last block failed"
if nbdsh -u "$(nbd_uri)" -c "h.pread(4096, $NEW_SIZE)" 2>/dev/null; then fail "a read past the new end succeeded"; fi

# ---- C: restart, read back; written back to the right place ----
grown_restart_flush "$NEW_SIZE" "$WORK/old.bin" "$WORK/new.bin" $((72 * M))
cmp -s <(dd if="$BACKING" bs=1M skip=$((72 * M + DATA_OFFSET)) count=16 iflag=skip_bytes status=none) \
  "$WORK/new.bin" || fail "the backing file does not hold the data written past the old end"

# ---- D: shrinking is refused ----
truncate -s 96M "$BACKING"
rc=0
err=$(ctl resize 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "ctl resize of a shrunk backing file exited $rc, want 1: $err"
expect_contains "$err" "shrinking is not supported" "ctl resize of a shrunk backing file"
[[ $(grep -c . <<<"$err") == 1 ]] || fail "more than one line: $err"
[[ $(nbd_size) == "$NEW_SIZE" ]] || fail "a refused shrink changed the size: $(nbd_size)"
truncate -s 128M "$BACKING"
stop_server
