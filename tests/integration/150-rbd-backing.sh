#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 150-rbd-backing — `rbd:` backing devices against a real Ceph cluster (one
# ceph-mon, one memstore ceph-osd on 127.0.0.1, cephx on: tests/ceph/
# cluster.sh), through librbd, with and without a cache:
#  1. no cache: fio crc32c verify (4 connections, mixed 4k..1M) written and
#     verified again on new connections; qemu-io patterns with write-zeroes
#     (plain and may-unmap) and discard, neighbours intact;
#  2. `ubcache format --backing rbd:…` (the bcache superblock in the image's
#     first 8 KiB), then in each cache mode (writethrough, writeback,
#     writearound, none): fio verify in its own region, verified again
#     after a restart of the daemon;
#  3. writeback: a random 32 MiB file copied in by nbdcopy, `ctl detach`
#     (writes the dirty data back), and `rbd export` of the image is
#     byte-identical past data_offset to everything clients wrote;
#  4. exclusive ownership: while a daemon serves an image, a second serve
#     with another cephx client id waits up to its timeout= for the lock,
#     then is refused (exit 2) by the name `rbd status` gives the holder; a
#     read-only probe shares; the first goes on;
#  5. an OSD that stops answering (SIGSTOP): with timeout=5, a read fails
#     with EIO after ~5 s, the daemon lives, and a read waiting when the
#     OSD comes back within the timeout completes with the right data;
#  6. writeback through an OSD outage: the first write needing the backing
#     superblock marked dirty fails with EIO in bounded time (it used to
#     wait for as long as the outage lasted); once dirty, writes are
#     acknowledged from the cache, kept dirty while writeback fails, and in
#     the image after the OSD returns and `ctl detach`;
#  7. clear errors, exit 2, in bounded time (and a conf=PATH option is not
#     taken for a file path): a missing image, a missing
#     pool, an unknown client id, a cluster nobody listens on (timeout=3).
# ctest: cost 250
source "$(dirname "$0")/lib.sh"

CEPH=$WORK/ceph
CONF=$("$UBCACHE_SRC/tests/ceph/cluster.sh" start "$CEPH") || fail "the Ceph cluster did not start"
on_exit "'$UBCACHE_SRC/tests/ceph/cluster.sh' stop '$CEPH'"
rbdc() { rbd -c "$CONF" "$@"; }
spec() { echo "rbd,conf=$CONF:rbd/$1"; }
M=$((1 << 20))

# ---- 1. no cache ----
rbdc create rbd/plain --size 256M || fail "rbd create"
start_server --backing "$(spec plain)" --nbd "unix:$SOCK"
mixed=(--numjobs=4 --size=32M --offset_increment=32M --iodepth=16
       --bssplit=4k/30:8k/10:16k/10:64k/20:128k/10:512k/10:1m/10 --blockalign=4k
       --verify=crc32c --verify_fatal=1 --do_verify=1)
run_fio "plain: randwrite mixed verify" --name=mixed --rw=randwrite "${mixed[@]}"
run_fio "plain: verify-only" --name=mixed --rw=randwrite "${mixed[@]}" --verify_only=1
q=$((160 * M))
qio "plain: patterns" "write -q -P 7 $q 4M" "write -q -z $((q + M)) 1M" "write -q -z -u $((q + 2 * M)) 4k" \
  "discard -q $((q + 3 * M)) 512k" "read -q -P 7 $q 1M" "read -q -P 0 $((q + M)) 1M" \
  "read -q -P 0 $((q + 2 * M)) 4k" "read -q -P 7 $((q + 2 * M + 4096)) $((M - 4096))" \
  "read -q -P 7 $((q + 3 * M + 512 * 1024)) 512k" "flush"
qio_must_fail "plain: self-check" "read -q -P 8 $q 64k"
stop_server

# ---- 2. a cache in front, every mode ----
rbdc create rbd/cached --size 192M || fail "rbd create"
CACHE=$WORK/cache.img
truncate -s 256M "$CACHE"
"$UBCACHE" format --cache "$CACHE" --backing "$(spec cached)" --label disk >"$WORK/format.log" 2>&1 ||
  fail "format --backing rbd: $(cat "$WORK/format.log")"
serve() {
  start_server --cache "$CACHE" --backing "$(spec cached)" --nbd "unix:$SOCK" --control "$CTL_SOCK" "$@"
}
region=0
for mode in writethrough writeback writearound none; do
  args=(--name="$mode" --rw=randwrite --numjobs=4 --size=8M --offset=$((region * 32 * M)) --offset_increment=8M
        --iodepth=16 --bssplit=4k/40:16k/20:64k/20:256k/10:1m/10 --blockalign=4k
        --verify=crc32c --verify_fatal=1 --do_verify=1)
  serve --cache-mode "$mode"
  run_fio "$mode: randwrite verify" "${args[@]}"
  stop_server
  serve --cache-mode "$mode"
  run_fio "$mode: verify-only after a restart" "${args[@]}" --verify_only=1
  stop_server
  region=$((region + 1))
done

# ---- 3. writeback, detach, rbd export ----
REF=$WORK/ref.img
serve --cache-mode writeback
SIZE=$(nbdinfo --size "$(nbd_uri)") || fail "nbdinfo --size"
# What every client has written so far, read back through the cache, then
# 32 MiB of new random data over part of it.
nbdcopy "$(nbd_uri)" "$REF" || fail "nbdcopy from the export"
head -c $((32 * M)) /dev/urandom >"$WORK/new.bin"
dd if="$WORK/new.bin" of="$REF" bs=1M seek=100 conv=notrunc status=none
python3 - "$(nbd_uri)" "$WORK/new.bin" <<'EOF' || fail "writing 32 MiB at 100 MiB"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
data = open(sys.argv[2], "rb").read()
for off in range(0, len(data), 1 << 20):
    h.pwrite(data[off:off + (1 << 20)], 100 * 2**20 + off)
h.flush(); h.shutdown()
EOF
dirty=$(ctl get dirty_data)
((dirty > 0)) || fail "writeback: no dirty data after 32 MiB of writes (dirty_data $dirty)"
ctl detach >"$WORK/detach.out" 2>&1 || fail "ctl detach: $(cat "$WORK/detach.out")"
stop_server
rbdc export rbd/cached "$WORK/export.img" >/dev/null 2>&1 || fail "rbd export"
python3 - "$WORK/export.img" "$REF" "$SIZE" <<'EOF' || fail "rbd export differs from what the clients wrote"
import sys
exp, ref, size = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read(), int(sys.argv[3])
off = len(exp) - size  # data_offset: the bcache superblock's area
assert off == 8192, f"data offset {off}"
data = exp[off:]
if data != ref:
    i = next(i for i in range(len(ref)) if data[i] != ref[i])
    sys.exit(f"first difference at byte {i} of the export")
EOF
log "rbd export of the detached image matches what clients wrote ($SIZE bytes past 8 KiB)"

# ---- 4. exclusive ownership ----
# A daemon serving an image holds its exclusive lock; another client (its
# own cephx id, as another host would be) is refused, by the holder's name;
# a read-only open may share; the first daemon goes on serving.
ceph -c "$CONF" auth get-or-create client.second mon 'profile rbd' osd 'profile rbd pool=rbd' \
  -o "$CEPH/second.keyring" >/dev/null || fail "ceph auth get-or-create client.second"
# timeout=4: a held lock is waited for that long (a killed holder's frees
# once the cluster times its watch out), then refused.
SECOND="rbd,conf=$CONF,id=second,keyring=$CEPH/second.keyring,timeout=4:rbd/plain"
start_server --backing "$(spec plain)" --nbd "unix:$SOCK"
qio "locked: first daemon" "write -q -P 9 0 1M" "flush"
holder=$(rbdc status rbd/plain | awk '/watcher=/ {for (i = 1; i <= NF; i++) if ($i ~ /^client\./) print $i}' | head -n 1)
[[ -n $holder ]] || fail "rbd status shows no watcher for the serving daemon: $(rbdc status rbd/plain)"
t0=$SECONDS
out=$(timeout 60 "$UBCACHE" serve --backing "$SECOND" --nbd "unix:$WORK/second.sock" 2>&1) && rc=0 || rc=$?
((rc == 2)) || fail "a second serve of a locked image exited $rc (want 2): $out"
((SECONDS - t0 <= 20)) || fail "the second serve took $((SECONDS - t0)) s to be refused (timeout=4)"
expect_contains "$out" "waiting up to 4 s" "the second serve says it waits for the lock"
expect_contains "$out" "exclusive lock" "the second serve's refusal"
expect_contains "$out" "held by $holder" "the refusal names the holder (rbd status: $holder)"
log "second serve refused: $out"
timeout 60 "$UBCACHE" probe --read-only --seconds 1 "$SECOND" >"$WORK/ro-probe.out" 2>&1 ||
  fail "a read-only probe of the locked image failed: $(cat "$WORK/ro-probe.out")"
qio "locked: first daemon still serves" "read -q -P 9 0 1M" "write -q -P 10 1M 1M" "read -q -P 10 1M 1M"
stop_server

# ---- 5. an OSD that stops answering ----
# With timeout=5, a request to a stopped OSD fails with EIO after about 5 s
# (never a hang), the daemon goes on, and a request that is waiting when
# the OSD comes back within the timeout completes with the right data.
start_server --backing "rbd,conf=$CONF,timeout=5:rbd/plain" --nbd "unix:$SOCK"
qio "osd: before" "write -q -P 11 $((200 * M)) 1M" "flush"
OSD=$(cat "$CEPH/run/osd.0.pid")
on_exit "kill -CONT $OSD"
kill -STOP "$OSD"
t0=$SECONDS
out=$(timeout 120 qemu-io -f raw "$(nbd_uri)" -c "read -q -P 11 $((200 * M)) 64k" 2>&1) || true
took=$((SECONDS - t0))
expect_contains "$out" "Input/output error" "a read from a stopped OSD"
((took >= 4 && took <= 30)) || fail "a read from a stopped OSD failed after $took s (timeout=5)"
log "stopped OSD: the read failed with EIO after $took s"
server_alive "a request to a stopped OSD timed out"
(timeout 120 qemu-io -f raw "$(nbd_uri)" -c "read -q -P 11 $((200 * M)) 64k" >"$WORK/back.out" 2>&1; echo "rc $?" >>"$WORK/back.out") &
waiter=$!
sleep 2
kill -CONT "$OSD"
wait "$waiter"
grep -q "rc 0" "$WORK/back.out" && ! grep -qiE "failed|error" "$WORK/back.out" ||
  fail "a read waiting when the OSD came back (within the timeout) did not complete: $(cat "$WORK/back.out")"
qio "osd: after" "read -q -P 11 $((200 * M)) 1M" "write -q -P 12 $((200 * M)) 64k" "read -q -P 12 $((200 * M)) 64k"
stop_server

# ---- 6. writeback through an OSD outage ----
# (a) The first write that needs the backing superblock marked dirty, while
# the OSD is stopped: EIO within bounds (the mark times out, the write goes
# through and times out), never a wait for as long as the outage lasts.
# (b) Once dirty, writes during an outage are acknowledged from the cache
# and read back; writeback fails and keeps them dirty (writeback_errors);
# when the OSD returns they are written back, and after `ctl detach` the
# image holds them.
rbdc create rbd/outage --size 96M || fail "rbd create"
truncate -s 0 "$CACHE"; truncate -s 128M "$CACHE"
"$UBCACHE" format --cache "$CACHE" --backing "$(spec outage)" >"$WORK/format2.log" 2>&1 || fail "format: $(cat "$WORK/format2.log")"
start_server --cache "$CACHE" --backing "rbd,conf=$CONF,timeout=5:rbd/outage" --cache-mode writeback \
  --nbd "unix:$SOCK" --control "$CTL_SOCK"
kill -STOP "$OSD"
t0=$SECONDS
out=$(timeout 120 qemu-io -f raw "$(nbd_uri)" -c "write -q -P 31 0 1M" 2>&1) || true
took=$((SECONDS - t0))
kill -CONT "$OSD"
expect_contains "$out" "Input/output error" "the first dirty write during an outage"
((took <= 40)) || fail "the first dirty write during an outage took $took s (want EIO within ~2 timeouts)"
log "outage, superblock clean: the write failed with EIO after $took s"
qio "outage: dirty now" "write -q -P 32 0 1M" "flush"
kill -STOP "$OSD"
qio "outage: acknowledged from the cache" "write -q -P 33 $M 1M" "flush" "read -q -P 33 $M 1M" "read -q -P 32 0 1M"
ctl set writeback_delay 0 >/dev/null && ctl set writeback_percent 0 >/dev/null || fail "ctl set writeback knobs"
deadline=$((SECONDS + 60))
until (($(ctl get writeback_errors) > 0)); do
  ((SECONDS < deadline)) || fail "no writeback error counted while the OSD was stopped"
  sleep 1
done
(($(ctl get dirty_data) >= 2 * M)) || fail "dirty data lost while writeback failed: $(ctl get dirty_data)"
kill -CONT "$OSD"
timeout 120 "$UBCACHE" ctl --control "$CTL_SOCK" detach >"$WORK/detach2.out" 2>&1 || fail "ctl detach after the outage: $(cat "$WORK/detach2.out")"
stop_server
rbdc export rbd/outage "$WORK/outage.img" >/dev/null 2>&1 || fail "rbd export"
python3 - "$WORK/outage.img" <<'EOF' || fail "the image after the outage does not hold the acknowledged writes"
import sys
d = open(sys.argv[1], "rb").read()[8192:]
M = 1 << 20
assert d[:M] == bytes([32]) * M, "first MiB"
assert d[M:2 * M] == bytes([33]) * M, "second MiB"
EOF
log "outage: acknowledged writes were kept dirty and written back once the OSD returned"

# ---- 7. errors: one line naming the spec, exit 2, bounded ----
expect_error() {  # LABEL SPEC NEEDLE
  local out rc=0 t0=$SECONDS
  out=$(timeout 60 "$UBCACHE" probe --seconds 1 "$2" 2>&1) || rc=$?
  ((rc == 2)) || fail "$1: probe exited $rc (want 2): $out"
  expect_contains "$out" "$3" "$1"
  expect_contains "$out" "$2" "$1: the message names the spec"
  log "$1: '$out' in $((SECONDS - t0)) s"
}
expect_error "missing image" "$(spec nosuch)" "no image 'nosuch'"
expect_error "missing pool" "rbd,conf=$CONF:nopool/img" "no pool 'nopool'"
expect_error "unknown client" "rbd,conf=$CONF,id=nobody,timeout=5:rbd/plain" "no key for client.nobody"
sed "s/^mon host = .*/mon host = v2:127.0.0.1:$(free_tcp_port)/" "$CONF" >"$WORK/dead.conf"
expect_error "nobody listening" "rbd,conf=$WORK/dead.conf,timeout=3:rbd/plain" "cannot connect"
