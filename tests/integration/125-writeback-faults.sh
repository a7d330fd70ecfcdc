#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 125-writeback-faults — I/O errors in writeback mode (cache/cached_device.h,
# cache/writeback.h): what the client sees, and that nothing dirty is lost.
#
# The fault layer's configuration cannot be changed through the control
# socket (backend/fault_device.h has SetConfig, nothing in control/ calls
# it), so the daemon is restarted on the same devices with a `fault,...:`
# spec in front of them; the cache's index survives a clean restart.
#
# Phase 1, no faults: a formatted 64 MiB cache (64 KiB buckets) and a
# formatted 64 MiB backing file, writeback, writeback_running 0.
#   C = 256 KiB of random data put in the backing file before serving, read
#       twice through the cache: a clean cached extent (the second read hits);
#   D = 4 KiB at 16 MiB and E = 256 KiB at 24 MiB, random, written by the
#       client: dirty (dirty-data 260 KiB), never written back. D is one
#       block, one extent: writeback's retries of its failing cache read
#       count one I/O error each, spaced by the backoff of E's failing
#       write, so the restarted daemon stays far below the default
#       io_error_limit (8) until the test sets it to 0.
#   SIGTERM; every cached copy of C's and D's 4 KiB blocks is found in the
#   cache file (random data: the bytes are unique).
# Phase 2: cache `fault,eio=<each copy of C and D>,ops=r:CACHE`, backing
# `fault,eio=<E on the backing file>,ops=w:BACKING`; io_error_limit 0 (the
# cache is never failed: a failed cache's reads take another path);
# writeback_running 0 for (a) and (b), 1 for (c). Client-visible:
#   (a) reading D: EIO — qemu-io "read failed: Input/output error", nbd
#       python raises nbd.Error with errno EIO — for D's block and for a
#       64 KiB read around it (the whole request fails); never the backing
#       device's stale zeros (and the read path logs each failed cache
#       read of dirty data);
#   (b) reading C: exactly C's bytes (served from the backing device), and
#       io_errors grows and the daemon logs the fallback (the cache read was
#       tried and failed);
#   (c) writeback of E fails on the backing device: writeback_errors grows,
#       dirty-data stays 260 KiB over 3 s, state stays dirty, and E reads
#       back exactly through the cache.
# Phase 3, the faults removed (restart on the plain files): `ctl flush`
#   replies clean, dirty-data 0; the backing file past data_offset holds
#   C, D and E exactly, and equals the whole export (nbdcopy + cmp).
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"
NO_CONGESTION="--congested-read-threshold-us 0 --congested-write-threshold-us 0"
M=$((1 << 20)) K=1024
DATA_OFFSET=8192

CACHE=$WORK/cache.img BACKING=$WORK/backing.img
truncate -s 64M "$CACHE"
truncate -s 64M "$BACKING"
"$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --bucket-size 64k >"$WORK/format.log" 2>&1 ||
  fail "format: $(cat "$WORK/format.log")"
C_OFF=$((8 * M)) D_OFF=$((16 * M)) E_OFF=$((24 * M)) LEN=$((256 * K)) D_LEN=4096
for x in c e; do head -c $LEN /dev/urandom >"$WORK/$x.bin"; done
head -c $D_LEN /dev/urandom >"$WORK/d.bin"
DIRTY=$((D_LEN + LEN))
dd if="$WORK/c.bin" of="$BACKING" bs=4k seek=$(((DATA_OFFSET + C_OFF) / 4096)) conv=notrunc status=none
serve() {
  start_server --cache "$1" --backing "$2" --cache-mode writeback --nbd "unix:$SOCK" --control "$CTL_SOCK" \
    --sequential-cutoff 0 $NO_CONGESTION
}
# read_range OFF LEN — those bytes of the export, on stdout (nbd python).
read_range() {
  nbdsh -u "$(nbd_uri)" -c "import sys; sys.stdout.buffer.write(h.pread($2, $1))"
}
# read_errno OFF LEN — the errno name of a failing pread, or "ok".
read_errno() {
  nbdsh -u "$(nbd_uri)" -c "
import errno
try:
    h.pread($2, $1)
    print('ok')
except nbd.Error as e:
    print(errno.errorcode.get(e.errno, e.errno))
"
}

# ---- phase 1 ----
serve "$CACHE" "$BACKING"
ctl set writeback_running 0 >/dev/null
qio "1: C, first read (fills the cache)" "read -q 8M 256k"
h0=$(ctl get stats_total/cache_hits)
cmp <(read_range $C_OFF $LEN) "$WORK/c.bin" || fail "1: C reads back wrong"
(($(ctl get stats_total/cache_hits) > h0)) || fail "1: the second read of C did not hit: C is not cached"
qio "1: D and E" "write -q -s $WORK/d.bin $D_OFF $D_LEN" "write -q -s $WORK/e.bin $E_OFF $LEN" "flush"
[[ $(ctl dirty-data) == "$DIRTY" ]] || fail "1: dirty-data $(ctl dirty-data), want $DIRTY"
stop_server
[[ $("$UBCACHE" show-super "$BACKING" | awk '$1 == "state" {print $2}') == dirty ]] ||
  fail "1: the backing superblock is not dirty after a stop with dirty data"

# Each 4 KiB block of C and D, wherever the cache file holds it.
RANGES=$(python3 - "$CACHE" "$WORK/c.bin" "$WORK/d.bin" <<'EOF'
import sys
cache = open(sys.argv[1], "rb").read()
where = {}
for off in range(0, len(cache), 4096):
    where.setdefault(cache[off:off + 4096], []).append(off)
offs = []
for name in sys.argv[2:]:
    data = open(name, "rb").read()
    for b in range(0, len(data), 4096):
        found = where.get(data[b:b + 4096], [])
        if not found:
            sys.exit(f"block {b} of {name} is nowhere in the cache file")
        offs += found
offs.sort()
ranges = []
for o in offs:
    if ranges and ranges[-1][0] + ranges[-1][1] == o:
        ranges[-1][1] += 4096
    else:
        ranges.append([o, 4096])
print(",".join(f"eio={o}+{n}" for o, n in ranges))
EOF
) || fail "1: C or D is not in the cache file: $RANGES"
log "1: cache copies of C and D: $RANGES"
CACHE_FAULT="fault,$RANGES,ops=r:$CACHE"
BACKING_FAULT="fault,eio=$((DATA_OFFSET + E_OFF))+$LEN,ops=w:$BACKING"

# ---- phase 2 ----
serve "$CACHE_FAULT" "$BACKING_FAULT"
ctl set io_error_limit 0 >/dev/null
# Writeback (1 again after the restart) already ran into D; pause it for
# (a) and (b), and let a pass in progress end.
ctl set writeback_running 0 >/dev/null
sleep 1
e0=$(ctl get io_errors)
[[ $(ctl get state) == dirty && $(ctl dirty-data) == "$DIRTY" ]] ||
  fail "2: after the restart: state $(ctl get state), dirty-data $(ctl dirty-data)"
# (a) dirty data whose cache read fails
dirty_fails() { grep 'cache read of dirty data failed' "$SERVER_LOG" | grep -vc 'writeback:' || true; }
a1=$(dirty_fails)
out=$(timeout 30 qemu-io -f raw "$(nbd_uri)" -c "read -q $D_OFF $D_LEN" 2>&1) || true
grep -q 'read failed: Input/output error' <<<"$out" || fail "2a: reading D through qemu-io: $out"
got=$(read_errno $D_OFF $D_LEN)
[[ $got == EIO ]] || fail "2a: reading D (nbd python): $got, want EIO"
got=$(read_errno $((D_OFF - 32 * K)) $((64 * K)))
[[ $got == EIO ]] || fail "2a: a 64 KiB read around D (nbd python): $got, want EIO"
a2=$(dirty_fails)
((a2 >= a1 + 3)) || fail "2a: the read path logged $((a2 - a1)) failed cache reads of dirty data for 3 reads"
log "2a: reading dirty data whose cache copy fails: EIO (io_errors at the restart: $e0)"
# (b) clean data whose cache read fails
e1=$(ctl get io_errors)
fallbacks() { grep -c 'cache read failed, reading the backing device' "$SERVER_LOG" || true; }
f1=$(fallbacks)
cmp <(read_range $C_OFF $LEN) "$WORK/c.bin" || fail "2b: C (clean, its cache read failing) reads back wrong"
e2=$(ctl get io_errors) f2=$(fallbacks)
((e2 > e1 && f2 > f1)) ||
  fail "2b: io_errors $e1 -> $e2, fallback warnings $f1 -> $f2: C was not read from the failing cache"
log "2b: clean data whose cache copy fails: correct bytes; io_errors $e0 -> $e1 -> $e2"
# (c) writeback into a failing backing device
ctl set writeback_running 1 >/dev/null
for _ in $(seq 50); do (($(ctl get writeback_errors) >= 2)) && break; sleep 0.1; done
w1=$(ctl get writeback_errors)
((w1 >= 2)) || fail "2c: writeback_errors $w1 after 5 s of writeback into the faults"
sleep 3
w2=$(ctl get writeback_errors) dirty=$(ctl dirty-data)
log "2c: writeback_errors $w1 -> $w2 over 3 s; dirty-data $dirty; written $(ctl get writeback_written)"
((w2 > w1)) || fail "2c: writeback_errors did not grow ($w1 -> $w2): failed writebacks are not retried"
[[ $dirty == "$DIRTY" ]] || fail "2c: dirty-data $dirty after failed writebacks, want $DIRTY"
[[ $(ctl get state) == dirty ]] || fail "2c: state $(ctl get state)"
cmp <(read_range $E_OFF $LEN) "$WORK/e.bin" || fail "2c: E (dirty, its writeback failing) reads back wrong"
[[ $(ctl get cache_failed) == 0 ]] || fail "2: the cache was failed despite io_error_limit 0"
stop_server

# ---- phase 3 ----
serve "$CACHE" "$BACKING"
rc=0
timeout 60 "$UBCACHE" ctl --control "$CTL_SOCK" flush >"$WORK/flush.out" 2>"$WORK/flush.err" || rc=$?
((rc == 0)) || fail "3: ctl flush exited $rc: $(cat "$WORK/flush.err" "$WORK/flush.out")"
grep -q ': clean, ' "$WORK/flush.out" || fail "3: the flush reply does not say clean: $(cat "$WORK/flush.out")"
[[ $(ctl dirty-data) == 0 && $(ctl get state) == clean ]] ||
  fail "3: after the flush: dirty-data $(ctl dirty-data), state $(ctl get state)"
log "3: $(cat "$WORK/flush.out")"
timeout 60 nbdcopy "$(nbd_uri)" "$WORK/export.img" || fail "3: nbdcopy"
stop_server
for x in c:$C_OFF d:$D_OFF e:$E_OFF; do
  f=$WORK/${x%%:*}.bin
  cmp <(tail -c +$((DATA_OFFSET + ${x#*:} + 1)) "$BACKING" | head -c "$(stat -c %s "$f")") "$f" ||
    fail "3: ${x%%:*} is not on the backing device after the flush"
done
cmp <(tail -c +$((DATA_OFFSET + 1)) "$BACKING") "$WORK/export.img" ||
  fail "3: the backing file's data area differs from the export"
