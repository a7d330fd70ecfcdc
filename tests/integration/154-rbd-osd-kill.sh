#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 154-rbd-osd-kill — the OSD killed (SIGKILL) under an `rbd:` backing: a
# one-node Ceph cluster whose OSD keeps its data on disk (tests/ceph/
# cluster.sh with OSD_OBJECTSTORE=bluestore; kill-osd / start-osd), so it
# can die mid-run and come back with everything it acknowledged:
#  a. no cache, timeout=30: fio crc32c verify (4 connections, mixed sizes,
#     rate-limited so the kill lands in its write phase) while the OSD is
#     killed and started again within the timeout: the requests in flight
#     block (the longest completion latency spans the outage), then
#     complete; fio exits 0 and its verify passes, and again on new
#     connections (verify only);
#  b. no cache, timeout=5, the OSD killed and left dead: reads and writes in
#     flight on two connections fail with EIO after the timeout, measured
#     per request (a write to an object the image has not allocated yet
#     first updates the object map, and librbd invalidates the map when
#     that times out: two timeouts); the daemon lives and answers
#     (nbdinfo); after start-osd new I/O works, and everything acknowledged
#     before the kill reads back, through the export and in `rbd export`;
#  c. a formatted cache in writeback over an image of random data,
#     timeout=5: 4 MiB dirty when the OSD is killed; writes during the
#     outage are acknowledged from the cache at once and read back;
#     writeback fails (writeback_errors) and keeps every byte dirty (exact
#     dirty_data); `ctl flush` waits while the OSD is dead and completes
#     once it is back (dirty_data 0, state clean, not fenced); `rbd export`
#     of the image is byte-identical, past data_offset, to the image as it
#     was plus everything written.
#
# A run takes about 65 s on 2 cores, 15 of them starting the cluster.
# ctest: cost 200
source "$(dirname "$0")/lib.sh"

CLUSTER=$UBCACHE_SRC/tests/ceph/cluster.sh
CEPH=$WORK/ceph
# A client whose watch timed out while the OSD was dead registers a new one
# when it is back, but the OSD reloads the old one from its store and keeps
# it until osd_client_watch_timeout passes: until then each notify librbd
# sends waits 5 s for it, and closing the image sends two. A 5 s watch
# timeout (as 152 has) keeps that short; stopping may still take 10 s more.
CONF=$(OSD_OBJECTSTORE=bluestore OSD_WATCH_TIMEOUT=5 "$CLUSTER" start "$CEPH") ||
  fail "the Ceph cluster (bluestore) did not start"
STOP_TIMEOUT=$((STOP_TIMEOUT + 15))
on_exit "'$CLUSTER' stop '$CEPH'"
rbdc() { rbd -c "$CONF" "$@"; }
spec() { echo "rbd,conf=$CONF,timeout=$1:rbd/$2"; }
M=$((1 << 20))
now() { date +%s.%N; }
since() { python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}")' "$1" "$(now)"; }
# in_range X LO HI — LO <= X <= HI (decimals).
in_range() { python3 -c 'import sys; x, lo, hi = map(float, sys.argv[1:]); sys.exit(0 if lo <= x <= hi else 1)' "$@"; }

OSD_PID=""
kill_osd() {
  OSD_PID=$(cat "$CEPH/run/osd.0.pid") || fail "no OSD pid file"
  "$CLUSTER" kill-osd "$CEPH" || fail "cluster.sh kill-osd"
  ! kill -0 "$OSD_PID" 2>/dev/null || [[ $(awk '{print $3}' "/proc/$OSD_PID/stat") == Z ]] ||
    fail "the OSD (pid $OSD_PID) still runs after kill-osd"
  log "OSD (pid $OSD_PID) killed with SIGKILL"
}
start_osd() {
  local t0
  t0=$(now)
  "$CLUSTER" start-osd "$CEPH" >"$WORK/start-osd.log" 2>&1 || fail "cluster.sh start-osd: $(cat "$WORK/start-osd.log")"
  [[ $(cat "$CEPH/run/osd.0.pid") != "$OSD_PID" ]] || fail "start-osd: the pid file still names the killed OSD"
  log "OSD started again on its BlueStore (pid $(cat "$CEPH/run/osd.0.pid")): up, in, PGs active+clean in $(since "$t0") s"
}
not_fenced() {  # LABEL — the log says nothing of a fence
  ! grep -qi "fenced" "$SERVER_LOG" || fail "$1: the daemon fenced itself: $(grep -i fenced "$SERVER_LOG")"
}

# nbd_write REF OFF:LEN... — new random data at each range through the
# export, then a flush; REF (the expected image, past data_offset) gets the
# same bytes. Prints the seconds it took.
nbd_write() {
  python3 - "$(nbd_uri)" "$@" <<'EOF'
import nbd, os, sys, time
h = nbd.NBD(); h.connect_uri(sys.argv[1])
t0 = time.monotonic()
with open(sys.argv[2], "r+b") as ref:
    for r in sys.argv[3:]:
        off, n = map(int, r.split(":"))
        data = os.urandom(n)
        h.pwrite(data, off)
        ref.seek(off); ref.write(data)
h.flush()
print(f"{time.monotonic() - t0:.2f}")
h.shutdown()
EOF
}
# nbd_check REF OFF:LEN... — each range reads back as in REF.
nbd_check() {
  python3 - "$(nbd_uri)" "$@" <<'EOF'
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
with open(sys.argv[2], "rb") as ref:
    for r in sys.argv[3:]:
        off, n = map(int, r.split(":"))
        ref.seek(off)
        if h.pread(n, off) != ref.read(n):
            sys.exit(f"{off}+{n} reads back other data")
h.shutdown()
EOF
}

# ---- a. no cache: the OSD killed and back within the timeout ----
rbdc create rbd/a --size 128M || fail "rbd create rbd/a"
start_server --backing "$(spec 30 a)" --nbd "unix:$SOCK"
job=(--name=osdkill --rw=randwrite --numjobs=4 --size=24M --offset_increment=24M --iodepth=16
     --bssplit=4k/30:16k/20:64k/20:256k/20:1m/10 --blockalign=4k
     --verify=crc32c --verify_fatal=1 --do_verify=1)
label="a: randwrite verify through the kill"
# 4 MiB/s per job: a 6 s write phase without the outage.
run_fio "$label" "${job[@]}" --rate=4m &
fio_pid=$!
sleep 2
kill -0 "$fio_pid" 2>/dev/null || fail "a: fio ended before the OSD was killed"
kill_osd
t_kill=$(now)
sleep 3
kill -0 "$fio_pid" 2>/dev/null || fail "a: fio ended while the OSD was dead"
start_osd
outage=$(since "$t_kill")
in_range "$outage" 0 25 || fail "a: the OSD was away $outage s: too close to timeout=30 for this test to mean anything"
wait "$fio_pid" || fail "a: the fio run through the outage failed (above)"
json=$WORK/fio.${label//[^a-z0-9]/_}.json
python3 - "$json" <<'EOF' || fail "a: fio's completion latencies do not show requests blocked through the outage"
import json, sys
text = open(sys.argv[1]).read()
doc = json.loads(text[text.index("{"):])
worst = max(j["write"]["clat_ns"]["max"] for j in doc["jobs"]) / 1e9
print(f"[154-rbd-osd-kill] a: longest write completion {worst:.1f} s", file=sys.stderr)
sys.exit(0 if worst >= 3 else 1)
EOF
run_fio "a: verify only, new connections" "${job[@]}" --verify_only=1
not_fenced "a"
log "a: the OSD was away $outage s (timeout=30): fio's requests waited, completed and verify"
stop_server

# ---- b. no cache: the OSD killed and not back within the timeout ----
T=5
rbdc create rbd/b --size 64M || fail "rbd create rbd/b"
start_server --backing "$(spec $T b)" --nbd "unix:$SOCK"
SIZE=$(nbdinfo --size "$(nbd_uri)") || fail "nbdinfo --size"
REF=$WORK/ref-b.img
truncate -s "$SIZE" "$REF"
# Acknowledged before the kill: 14 MiB over the first four objects (4 MiB
# each) and the first MiB of the fifth; the sixth and on stay unallocated.
nbd_write "$REF" 0:$((4 * M)) $((4 * M)):$((3 * M)) $((8 * M + 4096)):$((2 * M)) \
  $((12 * M)):$((4 * M)) $((16 * M)):$M >/dev/null || fail "b: writes before the kill"
kill_osd
# In flight at once: reads of acknowledged data, writes into objects that
# exist (one op each) and into one that does not (its object-map update
# times out: one timeout too, since serve turns librbd's invalidation of
# the map on that timeout off); and a read on a second connection.
python3 - "$(nbd_uri)" "$T" "$WORK/b-times.txt" <<'EOF' || fail "b: requests to a dead OSD (above)"
import errno, nbd, sys, time
uri, T, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
M = 1 << 20
h, h2 = nbd.NBD(), nbd.NBD()
h.connect_uri(uri); h2.connect_uri(uri)
reqs = []  # (what, allowed seconds, handle, buffer, cookie)
t0 = time.monotonic()
for off in (0, 5 * M, 9 * M, 13 * M):
    b = nbd.Buffer(64 * 1024)
    reqs.append((f"read at {off}", T + 3, h, b, h.aio_pread(b, off)))
for off in (17 * M, 18 * M + 4096):
    b = nbd.Buffer.from_bytearray(bytearray(b"\x55" * 65536))
    reqs.append((f"write at {off} (allocated object)", T + 3, h, b, h.aio_pwrite(b, off)))
b = nbd.Buffer.from_bytearray(bytearray(b"\x66" * 65536))
reqs.append((f"write at {40 * M} (unallocated object)", T + 3, h, b, h.aio_pwrite(b, 40 * M)))
b = nbd.Buffer(4096)
reqs.append(("read at 4096, second connection", T + 3, h2, b, h2.aio_pread(b, 4096)))
done = {}
while len(done) < len(reqs) and time.monotonic() - t0 < 4 * T + 30:
    for conn in (h, h2):
        if conn.aio_in_flight() > 0:
            conn.poll(50)
    for what, _, conn, _, c in reqs:
        if what in done:
            continue
        try:
            if conn.aio_command_completed(c):
                done[what] = (time.monotonic() - t0, "none")
        except nbd.Error as e:  # e.errno: a number, or its name
            done[what] = (time.monotonic() - t0, errno.errorcode.get(e.errno, e.errno))
bad = []
with open(out, "w") as f:
    for what, limit, _, _, _ in reqs:
        took, err = done.get(what, (None, None))
        f.write(f"{what}: {'pending' if took is None else f'{took:.2f} s'} errno {err}\n")
        if took is None:
            bad.append(f"{what}: no reply within {4 * T + 30:.0f} s")
        elif err != "EIO":
            bad.append(f"{what}: errno {err} after {took:.2f} s (want EIO)")
        elif not T - 0.2 <= took <= limit:
            bad.append(f"{what}: EIO after {took:.2f} s (want {T:.0f}..{limit:.0f} s)")
print(open(out).read(), end="", file=sys.stderr)
sys.exit("\n".join(bad) if bad else 0)
EOF
# Serving and answering with the OSD still dead.
server_alive "b: requests to a dead OSD timed out"
size2=$(timeout 10 nbdinfo --size "$(nbd_uri)") && [[ $size2 == "$SIZE" ]] ||
  fail "b: nbdinfo during the outage: '$size2' (want $SIZE)"
start_osd
qio "b: new I/O after start-osd" "write -q -P 41 $((48 * M)) 1M" "read -q -P 41 $((48 * M)) 1M" \
  "write -q -P 42 $((2 * M)) 64k" "read -q -P 42 $((2 * M)) 64k" "flush"
dd if=/dev/zero bs=64k count=1 status=none | tr '\0' '\52' | dd of="$REF" bs=64k seek=$((2 * M / 65536)) conv=notrunc status=none
# Everything acknowledged before the kill, and the new writes, through the
# export (0..17 MiB; the failed writes' object is left out: undefined).
nbd_check "$REF" 0:$((17 * M)) || fail "b: data acknowledged before the kill"
not_fenced "b"
stop_server
rbdc export rbd/b "$WORK/b.img" >/dev/null 2>&1 || fail "b: rbd export"
cmp -n $((17 * M)) "$WORK/b.img" "$REF" || fail "b: rbd export: the first 17 MiB differ from what was acknowledged"
log "b: with the OSD dead, requests failed with EIO in time ($(tr '\n' ';' <"$WORK/b-times.txt")); after start-osd everything reads back"

# ---- c. writeback: dirty data through the OSD's death ----
# The image starts as random data (every object allocated: a writeback
# write is one request, failing after one timeout); format writes the
# first 8 KiB, the rest is what the export starts with.
head -c $((64 * M)) /dev/urandom >"$WORK/c-init.img"
rbdc import "$WORK/c-init.img" rbd/c >/dev/null 2>&1 || fail "rbd import rbd/c"
CACHE=$WORK/cache.img
truncate -s 128M "$CACHE"
"$UBCACHE" format --cache "$CACHE" --backing "rbd,conf=$CONF:rbd/c" >"$WORK/format.log" 2>&1 ||
  fail "format --backing rbd: $(cat "$WORK/format.log")"
start_server --cache "$CACHE" --backing "$(spec $T c)" --cache-mode writeback --sequential-cutoff 0 \
  --nbd "unix:$SOCK" --control "$CTL_SOCK"
SIZE=$(nbdinfo --size "$(nbd_uri)") || fail "nbdinfo --size"
REF=$WORK/ref-c.img
tail -c +8193 "$WORK/c-init.img" >"$REF"
[[ $(stat -c %s "$REF") == "$SIZE" ]] || fail "c: the export is $SIZE bytes, the image past 8 KiB $(stat -c %s "$REF")"
# Dirty before the kill (writeback paused; the backing superblock is marked
# dirty now, while the OSD answers): 4 MiB.
ctl set writeback_running 0 >/dev/null || fail "ctl set writeback_running 0"
nbd_write "$REF" 0:$M $((2 * M)):$M $((4 * M)):$M $((6 * M)):$M >/dev/null || fail "c: writes before the kill"
[[ $(ctl get dirty_data) == $((4 * M)) ]] || fail "c: dirty_data $(ctl get dirty_data) before the kill (want $((4 * M)))"
kill_osd
# Acknowledged from the cache, not after a timeout: 5 MiB more, one range
# over dirty data (6.5..7 MiB), 2 MiB far away; union 0..7 and 16..18 MiB.
took=$(nbd_write "$REF" $M:$M $((3 * M)):$M $((5 * M)):$M $((6 * M + M / 2)):$((M / 2)) $((16 * M)):$((2 * M))) ||
  fail "c: writes during the outage failed"
in_range "$took" 0 $((T - 1)) || fail "c: writes during the outage took $took s to be acknowledged (timeout=$T)"
nbd_check "$REF" 0:$((7 * M)) $((16 * M)):$((2 * M)) || fail "c: data written before and during the outage, read back from the cache"
# In flush order (the default) the first nbd_write's FLUSH closed an epoch:
# 6.5..7 MiB, overwritten in the next one, keeps its older version in the
# cache until that epoch is on the image (a kept version is dirty data too).
want_dirty=$((9 * M + M / 2))
[[ $(ctl get dirty_data) == "$want_dirty" ]] || fail "c: dirty_data $(ctl get dirty_data) during the outage (want $want_dirty)"
# Writeback at full speed against the dead OSD: it fails, the data stays
# dirty, and the flush waits.
ctl set writeback_percent 0 >/dev/null && ctl set writeback_delay 0 >/dev/null &&
  ctl set writeback_running 1 >/dev/null || fail "ctl set writeback knobs"
"$UBCACHE" ctl --control "$CTL_SOCK" flush >"$WORK/flush.out" 2>&1 &
flush_pid=$!
deadline=$((SECONDS + T + 15))
until (($(ctl get writeback_errors) > 0)); do
  ((SECONDS < deadline)) || fail "c: no writeback error counted $((T + 15)) s into the outage"
  sleep 0.5
done
sleep 1
kill -0 "$flush_pid" 2>/dev/null || fail "c: ctl flush returned with the OSD dead: $(cat "$WORK/flush.out")"
[[ $(ctl get dirty_data) == "$want_dirty" ]] || fail "c: dirty_data $(ctl get dirty_data) after failed writeback (want $want_dirty)"
[[ $(ctl get state) == dirty && $(ctl get fenced) == 0 ]] ||
  fail "c: state '$(ctl get state)', fenced $(ctl get fenced) during the outage (want dirty, 0)"
expect_contains "$(cat "$WORK/flush.out")" "9.50 MiB dirty left" "c: ctl flush's progress with the OSD dead"
errors=$(ctl get writeback_errors)
log "c: OSD dead: writes acknowledged in $took s, $errors writeback errors, 9.5 MiB still dirty, ctl flush waiting"
start_osd
t0=$(now)
for _ in $(seq 120); do kill -0 "$flush_pid" 2>/dev/null || break; sleep 0.5; done
kill -0 "$flush_pid" 2>/dev/null && fail "c: ctl flush still waits 60 s after the OSD came back: $(tail -n 3 "$WORK/flush.out")"
wait "$flush_pid" || fail "c: ctl flush failed after the OSD came back: $(cat "$WORK/flush.out")"
expect_contains "$(tail -n 1 "$WORK/flush.out")" "clean" "c: ctl flush's reply"
[[ $(ctl get dirty_data) == 0 && $(ctl get state) == clean && $(ctl get fenced) == 0 ]] ||
  fail "c: after the flush: dirty_data $(ctl get dirty_data), state $(ctl get state), fenced $(ctl get fenced)"
log "c: the OSD back: ctl flush completed in $(since "$t0") s: $(tail -n 1 "$WORK/flush.out")"
nbd_check "$REF" 0:$((7 * M)) $((16 * M)):$((2 * M)) || fail "c: data after the writeback"
not_fenced "c"
stop_server
rbdc export rbd/c "$WORK/c.img" >/dev/null 2>&1 || fail "c: rbd export"
python3 - "$WORK/c.img" "$REF" <<'EOF' || fail "c: rbd export differs from what the clients wrote"
import sys
exp, ref = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
assert len(exp) - len(ref) == 8192, f"data offset {len(exp) - len(ref)}"
data = exp[8192:]
if data != ref:
    i = next(i for i in range(len(ref)) if data[i] != ref[i])
    sys.exit(f"first difference at byte {i} past data_offset")
EOF
log "c: rbd export matches everything written, before and during the outage (past data_offset)"
