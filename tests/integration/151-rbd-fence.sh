#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 151-rbd-fence — fencing: a ubcache whose rbd: image another client takes
# over stops serving it and never writes its stale dirty data back, and the
# next start does nothing with that data until an operator says what
# (serve --after-fence). Against a real one-node Ceph (tests/ceph/cluster.sh):
#  1. `rbd lock rm` (which blocklists the holder) under a writeback daemon
#     with 4 MiB dirty: within seconds ctl says fenced (state, fenced,
#     fence_reason), the metric ubcache_fenced is 1, the log says FENCED;
#     then a write, a read and a flush fail with EIO;
#  2. a new owner writes the image (rbd import-diff); stopping the fenced
#     daemon writes nothing back (the image is as the new owner left it);
#  3. a restart without --after-fence exits 2 naming the fence and the
#     dirty data; with --after-fence discard, clients read the new owner's
#     data, nothing is dirty, the backing superblock goes clean;
#  4. `ceph osd blocklist add` of the daemon's address fences it too; a
#     restart with --after-fence writeback writes its dirty data back over
#     the image (rbd export shows it);
#  5. without a cache, a broken lock fails the passthrough daemon's writes
#     with EIO.
# ctest: cost 200
source "$(dirname "$0")/lib.sh"

CEPH=$WORK/ceph
CONF=$("$UBCACHE_SRC/tests/ceph/cluster.sh" start "$CEPH") || fail "the Ceph cluster did not start"
on_exit "'$UBCACHE_SRC/tests/ceph/cluster.sh' stop '$CEPH'"
rbdc() { rbd -c "$CONF" "$@"; }
M=$((1 << 20))
IMG="rbd,conf=$CONF:rbd/img"
CACHE=$WORK/cache.img

# Writes BYTE over [OFF, OFF+LEN) of the image's client data (past the 8 KiB
# superblock area) as another client would, with the rbd CLI: an rbd diff
# (rbd diff v1: a 'w' record of le64 offset, le64 length and the data).
owner_writes() {  # OFF LEN BYTE
  python3 - "$WORK/owner.diff" "$1" "$2" "$3" <<'EOF'
import struct, sys
path, off, n, byte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(path, "wb") as f:
    f.write(b"rbd diff v1\n")
    f.write(b"w" + struct.pack("<QQ", 8192 + off, n) + bytes([byte]) * n)
    f.write(b"e")
EOF
  rbdc import-diff --no-progress "$WORK/owner.diff" rbd/img >/dev/null 2>&1 || fail "rbd import-diff (the new owner's write)"
}
# Checks the image's client data at OFF: LEN bytes of BYTE (rbd export).
image_holds() {  # LABEL OFF LEN BYTE
  rbdc export --no-progress rbd/img - >"$WORK/export.img" 2>"$WORK/export.err" || fail "rbd export: $(cat "$WORK/export.err")"
  python3 - "$WORK/export.img" "$2" "$3" "$4" <<'EOF' || fail "$1: the image does not hold what it should"
import sys
d = open(sys.argv[1], "rb").read()[8192:]
off, n, byte = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
got = d[off:off + n]
if got != bytes([byte]) * n:
    i = next(i for i in range(n) if got[i] != byte)
    sys.exit(f"byte {off + i}: {got[i]} (want {byte})")
EOF
}
# Breaks the image's lock as an operator taking it over would: `rbd lock
# rm`, which blocklists the holder too.
break_lock() {
  local lock l
  lock=$(rbdc lock ls --format json rbd/img) || fail "rbd lock ls"
  mapfile -t l < <(python3 -c 'import json, sys
l = json.loads(sys.argv[1])[0]
print(l["id"]); print(l["locker"])' "$lock")
  ((${#l[@]} == 2)) || fail "no lock in: $lock"
  rbdc lock rm rbd/img "${l[0]}" "${l[1]}" || fail "rbd lock rm '${l[0]}' ${l[1]}"
}
wait_fenced() {  # LABEL
  local deadline=$((SECONDS + 15))
  until [[ $(ctl get fenced 2>/dev/null) == 1 ]]; do
    ((SECONDS < deadline)) || fail "$1: not fenced 15 s later (ctl: $(ctl get fenced 2>&1))"
    sleep 0.2
  done
}
# SIGTERM to a fenced daemon: it stops within bounds, and exits 1 (its last
# flush failed: something is wrong).
stop_fenced() {
  server_alive "fenced"
  kill -TERM "$SERVER_PID"
  local deadline=$((SECONDS + 60)) rc=0
  while kill -0 "$SERVER_PID" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "the fenced daemon did not stop within 60 s of SIGTERM"
    sleep 0.2
  done
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=
  ((rc == 1)) || fail "a fenced daemon exited $rc after SIGTERM (want 1)"
}
serve_cached() { start_server --cache "$CACHE" --backing "$IMG" --nbd "unix:$SOCK" --control "$CTL_SOCK" "$@"; }
# A refused start: exit 2 within bounds, its message in $out.
expect_refused() {  # LABEL ARGS...
  local label=$1 rc=0
  shift
  out=$(timeout 120 "$UBCACHE" serve --cache "$CACHE" --backing "$IMG" --nbd "unix:$WORK/refused.sock" "$@" 2>&1) || rc=$?
  ((rc == 2)) || fail "$label: serve exited $rc (want 2): $out"
}

rbdc create rbd/img --size 128M || fail "rbd create"
truncate -s 256M "$CACHE"
"$UBCACHE" format --cache "$CACHE" --backing "$IMG" --label img >"$WORK/format.log" 2>&1 ||
  fail "format: $(cat "$WORK/format.log")"

# ---- 1. rbd lock rm fences a writeback daemon ----
serve_cached --cache-mode writeback
ctl set writeback_running 0 >/dev/null || fail "ctl set writeback_running 0"
qio "before the break" "write -q -P 5 0 4M" "flush" "read -q -P 5 0 4M"
(($(ctl get dirty_data) == 4 * M)) || fail "want 4 MiB dirty, have $(ctl get dirty_data)"
t0=$(date +%s.%N)
break_lock
wait_fenced "rbd lock rm"
log "fenced $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)") s after rbd lock rm"
[[ $(ctl get state) == fenced ]] || fail "ctl get state: $(ctl get state) (want fenced)"
expect_contains "$(ctl get fence_reason)" "blocklisted" "fence_reason after rbd lock rm"
expect_contains "$(ctl metrics)" 'ubcache_fenced{device="img"} 1' "the fenced metric"
expect_contains "$(cat "$SERVER_LOG")" "FENCED" "the daemon's log"
for cmd in "write -q -P 6 0 4k" "read -q 0 4k"; do
  out=$(timeout 60 qemu-io -f raw "$(nbd_uri)" -c "$cmd" 2>&1) || true
  expect_contains "$out" "Input/output error" "'$cmd' on a fenced daemon"
done
out=$(timeout 60 python3 -c 'import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
try:
    h.flush()
    print("flush ok")
except nbd.Error as e:
    print("flush:", e.string, e.errno)' "$(nbd_uri)" 2>&1)
expect_contains "$out" "EIO" "a flush on a fenced daemon"
(($(ctl get dirty_data) == 4 * M)) || fail "the fenced daemon's dirty data changed: $(ctl get dirty_data)"
out=$(timeout 60 "$UBCACHE" ctl --control "$CTL_SOCK" flush 2>&1) && fail "ctl flush of a fenced device succeeded: $out"
expect_contains "$out" "fenced" "ctl flush of a fenced device"

# ---- 2. the new owner writes; the fenced daemon writes nothing back ----
owner_writes 0 $M 7
stop_fenced
image_holds "after the fenced daemon stopped" 0 $M 7
image_holds "after the fenced daemon stopped" $M $((3 * M)) 0

# ---- 3. the restart: refused, then --after-fence discard ----
# The fence is in the cache superblock, as show-super prints it.
fences=$("$UBCACHE" show-super "$CACHE" | sed -n 's/^fences //p')
buuid=$("$UBCACHE" show-super "$IMG" | sed -n 's/^uuid //p')
[[ -n $buuid && $fences =~ ^$buuid@[0-9T:-]+Z$ ]] || fail "show-super: fences '$fences', want $buuid@TIME"
expect_refused "restart after the fence"
expect_contains "$out" "fenced at" "the refusal"
expect_contains "$out" "4 MiB of dirty data" "the refusal names the dirty data"
expect_contains "$out" "--after-fence" "the refusal says what to do"
log "refused: $out"
expect_refused "a bad --after-fence" --after-fence maybe 2>/dev/null
serve_cached --after-fence discard
expect_contains "$(cat "$SERVER_LOG")" "dropped (4 MiB of it dirty)" "the discard's log line"
qio "after discard: the new owner's data" "read -q -P 7 0 1M" "read -q -P 0 $M 3M"
[[ $(ctl get dirty_data) == 0 && $(ctl get fenced) == 0 ]] || fail "after discard: dirty $(ctl get dirty_data), fenced $(ctl get fenced)"
deadline=$((SECONDS + 30))
until [[ $(ctl get state) == clean ]]; do
  ((SECONDS < deadline)) || fail "after discard the backing superblock stays $(ctl get state)"
  sleep 0.5
done
qio "after discard: writeback works again" "write -q -P 8 $((2 * M)) 64k" "read -q -P 8 $((2 * M)) 64k"
stop_server
[[ $("$UBCACHE" show-super "$CACHE" | sed -n 's/^fences //p') == none ]] || fail "the fence stayed after the discard"
serve_cached
qio "a start after the discard needs no word" "read -q -P 7 0 1M" "read -q -P 8 $((2 * M)) 64k"
stop_server

# ---- 4. a blocklisted daemon is fenced; --after-fence writeback ----
serve_cached --cache-mode writeback
ctl set writeback_running 0 >/dev/null || fail "ctl set writeback_running 0"
qio "before the blocklist" "write -q -P 9 $((8 * M)) 4M" "flush"
addr=$(rbdc status --format json rbd/img | python3 -c 'import json,sys; print(json.load(sys.stdin)["watchers"][0]["address"])') ||
  fail "no watcher in rbd status"
ceph -c "$CONF" osd blocklist add "$addr" >/dev/null 2>&1 || fail "ceph osd blocklist add $addr"
wait_fenced "ceph osd blocklist add"
expect_contains "$(ctl get fence_reason)" "blocklisted" "fence_reason after a blocklist"
out=$(timeout 60 qemu-io -f raw "$(nbd_uri)" -c "write -q -P 10 $((8 * M)) 4k" 2>&1) || true
expect_contains "$out" "Input/output error" "a write to a blocklisted daemon"
stop_fenced
image_holds "the blocklisted daemon wrote nothing back" $((8 * M)) $((4 * M)) 0
expect_refused "restart after the blocklist"
expect_contains "$out" "4 MiB of dirty data" "the refusal after a blocklist"
serve_cached --after-fence writeback
qio "writeback: the cache's data" "read -q -P 9 $((8 * M)) 4M"
timeout 120 "$UBCACHE" ctl --control "$CTL_SOCK" flush >"$WORK/flush.out" 2>&1 || fail "ctl flush: $(cat "$WORK/flush.out")"
stop_server
image_holds "after --after-fence writeback and a flush" $((8 * M)) $((4 * M)) 9
log "blocklist: fenced; --after-fence writeback wrote the 4 MiB back"

# ---- 5. no cache: a broken lock fails the passthrough's writes ----
start_server --backing "$IMG" --nbd "unix:$SOCK"
qio "passthrough" "write -q -P 11 $((16 * M)) 64k" "flush"
break_lock
deadline=$((SECONDS + 15))
until grep -q "fenced" "$SERVER_LOG"; do
  ((SECONDS < deadline)) || fail "the passthrough daemon logged no fence"
  sleep 0.2
done
out=$(timeout 60 qemu-io -f raw "$(nbd_uri)" -c "write -q -P 12 $((16 * M)) 4k" 2>&1) || true
expect_contains "$out" "Input/output error" "a write to a fenced passthrough daemon"
stop_fenced
image_holds "passthrough: its last acknowledged write" $((16 * M)) 65536 11
log "ok"
