#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 123-writeback-full — a writeback cache that is full of dirty data keeps
# serving, correctly, and a flush then writes all of it back.
#
# Devices: a formatted 64 MiB cache (64 KiB buckets) and a formatted 256 MiB
# backing file behind the SAS model, writeback mode, writeback_running 0
# (nothing is written back until the flush), cutoff_writeback 70 and
# cutoff_writeback_sync 90 (their maxima), writeback_order lba: bcache's
# cutoffs. (In flush order a write past cutoff_writeback is absorbed up to
# the sync cutoff, and past that waits for writeback to reach its epoch:
# tests/unit/cache/epoch_order_test.cpp, rule 14.)
#  A. fio randwrite 128 KiB, QD8, verify=crc32c over 192 MiB (3x the cache,
#     every block once): no error, done within its timeout, and its verify
#     pass reads every block back correct. Dirty data (sampled every 0.5 s)
#     rises to >= 60 % of the cache's data buckets and stops there: it never
#     passes cutoff_writeback_sync of them (+ 16 buckets for writes in
#     flight when the cutoff was checked), and the last 3 s of the run add
#     nothing (the writes past cutoff_writeback go through to the backing
#     device); writeback_written stays 0.
#  B. 16 MiB more, as 64 KiB FUA writes (nbd python, CMD_FLAG_FUA) to blocks
#     A never wrote: sync writes may go writeback up to cutoff_writeback_sync,
#     so dirty grows past A's plateau but stays under the same bound; no
#     write fails.
#  C. the whole export is copied (nbdcopy) and A's region verified again
#     (fio --verify_only: every header, seed and crc), B's blocks compared
#     byte for byte.
#  D. writeback_running 1, `ctl flush`: progress lines, a reply that says
#     clean, then dirty-data 0, state clean, writeback_written >= the dirty
#     bytes before; the export copied again equals the copy from C, and the
#     backing file past data_offset (8 KiB) equals it byte for byte.
# ctest: label sanitized
# ctest: cost 90
source "$(dirname "$0")/lib.sh"
NO_CONGESTION="--congested-read-threshold-us 0 --congested-write-threshold-us 0"
M=$((1 << 20))
BUCKET=$((64 << 10))

CACHE=$WORK/cache.img BACKING=$WORK/backing.img
truncate -s 64M "$CACHE"
truncate -s 256M "$BACKING"
"$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --bucket-size 64k >"$WORK/format.log" 2>&1 ||
  fail "format: $(cat "$WORK/format.log")"
DATA_BUCKETS=$("$UBCACHE" show-super "$CACHE" | awk '$1 == "data_buckets" {print $2}')
[[ $DATA_BUCKETS =~ ^[0-9]+$ ]] || fail "no data_buckets in show-super $CACHE"
start_server --cache "$CACHE" --backing "sas:$BACKING" --cache-mode writeback --nbd "unix:$SOCK" \
  --control "$CTL_SOCK" --sequential-cutoff 0 $NO_CONGESTION
for kv in writeback_running=0 cutoff_writeback=70 cutoff_writeback_sync=90 writeback_order=lba; do
  ctl set "${kv%%=*}" "${kv#*=}" >/dev/null || fail "ctl set ${kv%%=*} ${kv#*=}"
done
CAP=$((DATA_BUCKETS * BUCKET))
BOUND=$(((DATA_BUCKETS * 90 / 100 + 16) * BUCKET))
log "cache: $DATA_BUCKETS data buckets ($CAP bytes); dirty bound $BOUND bytes"

# ---- A: 3x the cache, verified ----
SAMPLES=$WORK/dirty.txt
# One python process asks the control socket itself every 0.5 s: a new
# `ubcache ctl` per sample (a sanitized build's start-up, on a loaded
# machine) took longer than the interval, and too few samples came.
python3 - "$CTL_SOCK" "$SAMPLES" "$(dirname "$0")" <<'EOF' &
import sys, time
sys.path.insert(0, sys.argv[3])
from ctl_wire import request
while True:
    try:
        kind, payload = request(sys.argv[1], "dirty-data", timeout=5)
        value = payload.strip() if kind == "ok" else "x"
    except OSError:
        value = "x"
    with open(sys.argv[2], "a") as f:
        f.write(f"{time.time():.3f} {value}\n")
    time.sleep(0.5)
EOF
SAMPLER_PID=$!
on_exit '[[ -z $SAMPLER_PID ]] || kill "$SAMPLER_PID"'
FIO_A=(--name=full --rw=randwrite --bs=128k --iodepth=8 --offset=0 --size=192M --randseed=123
  --verify=crc32c --do_verify=1 --verify_fatal=1)
t0=$SECONDS
run_fio "A write 3x the cache" "${FIO_A[@]}"
log "A: 192 MiB written and verified in $((SECONDS - t0)) s"
kill "$SAMPLER_PID"
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=""
((SECONDS - t0 <= 60)) || fail "A took $((SECONDS - t0)) s (a full cache must not stall writes)"
DIRTY_A=$(ctl dirty-data) || fail "ctl dirty-data"
python3 - "$SAMPLES" "$CAP" "$BOUND" <<'EOF' || fail "A: dirty data did not behave (above)"
import sys
path, cap, bound = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = [(float(t), int(d)) for t, d in (l.split() for l in open(path)) if d != "x"]
assert len(s) >= 10, f"only {len(s)} samples"
peak = max(d for _, d in s)
end = s[-1][0]
tail = [d for t, d in s if t >= end - 3]
print(f"A: {len(s)} samples; dirty peak {peak} bytes = {100 * peak / cap:.1f} % of the cache; "
      f"last 3 s {min(tail)}..{max(tail)}", file=sys.stderr)
bad = []
if peak < 0.6 * cap: bad.append(f"dirty peaked at {peak} bytes, < 60 % of the cache: it never filled")
if peak > bound: bad.append(f"dirty reached {peak} bytes, past cutoff_writeback_sync's bound {bound}")
if max(tail) != min(tail): bad.append(f"dirty still changing in the last 3 s: {min(tail)}..{max(tail)}")
for b in bad: print("A: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
[[ $(ctl get writeback_written) == 0 ]] || fail "A: writeback_written $(ctl get writeback_written) with writeback_running 0"
[[ $(ctl get state) == dirty ]] || fail "A: state $(ctl get state), want dirty"
log "A: dirty $DIRTY_A bytes ($((DIRTY_A * 100 / CAP)) % of the cache), cache_available_percent $(ctl get cache_available_percent)"

# ---- B: sync (FUA) writes past cutoff_writeback ----
B_OFF=$((200 * M)) B_LEN=$((16 * M))
random_file "$WORK/b.bin" 16
timeout 60 nbdsh -u "$(nbd_uri)" -c "
import nbd
data = open('$WORK/b.bin', 'rb').read()
for off in range(0, $B_LEN, 65536):
    h.pwrite(data[off:off + 65536], $B_OFF + off, nbd.CMD_FLAG_FUA)
" 2>"$WORK/b.err" || fail "B: a FUA write failed or timed out: $(tail -n 5 "$WORK/b.err")"
DIRTY_B=$(ctl dirty-data)
log "B ($SECONDS s): dirty $DIRTY_B bytes ($((DIRTY_B * 100 / CAP)) % of the cache) after 16 MiB of FUA writes"
((DIRTY_B > DIRTY_A)) || fail "B: FUA writes did not go writeback past cutoff_writeback (dirty $DIRTY_A -> $DIRTY_B)"
((DIRTY_B <= BOUND)) || fail "B: dirty $DIRTY_B bytes passed cutoff_writeback_sync's bound $BOUND"
[[ $(ctl get writeback_written) == 0 ]] || fail "B: writeback_written $(ctl get writeback_written) with writeback_running 0"

# ---- C: everything reads back ----
timeout 60 nbdcopy "$(nbd_uri)" "$WORK/before.img" || fail "C: nbdcopy of the export failed"
cmp <(tail -c +$((B_OFF + 1)) "$WORK/before.img" | head -c $B_LEN) "$WORK/b.bin" ||
  fail "C: the FUA-written blocks read back wrong"
run_fio "C verify A" "${FIO_A[@]}" --verify_only
[[ $(ctl dirty-data) == "$DIRTY_B" ]] || fail "C: dirty data changed while only reading ($DIRTY_B -> $(ctl dirty-data))"

# ---- D: flush writes it all back ----
ctl set writeback_running 1 >/dev/null
rc=0
timeout 60 "$UBCACHE" ctl --control "$CTL_SOCK" flush >"$WORK/flush.out" 2>"$WORK/flush.err" || rc=$?
((rc == 0)) || fail "D: ctl flush exited $rc: $(cat "$WORK/flush.err" "$WORK/flush.out")"
log "D ($SECONDS s): flush: $(tail -n 1 "$WORK/flush.out") ($(grep -c 'dirty left' "$WORK/flush.err") progress lines)"
grep -q 'dirty left' "$WORK/flush.err" || fail "D: flush printed no progress line: $(cat "$WORK/flush.err")"
grep -q ': clean, ' "$WORK/flush.out" || fail "D: the flush reply does not say clean: $(cat "$WORK/flush.out")"
[[ $(ctl dirty-data) == 0 ]] || fail "D: dirty-data $(ctl dirty-data) after the flush"
[[ $(ctl get state) == clean ]] || fail "D: state $(ctl get state) after the flush"
W=$(ctl get writeback_written)
((W >= DIRTY_B)) || fail "D: writeback_written $W < the $DIRTY_B dirty bytes flushed"
"$UBCACHE" show-super "$BACKING" | grep -qE '^state clean$' || fail "D: backing superblock not clean after the flush"
timeout 60 nbdcopy "$(nbd_uri)" "$WORK/after.img" || fail "D: nbdcopy after the flush failed"
cmp "$WORK/before.img" "$WORK/after.img" || fail "D: the export changed across the flush"
cmp <(tail -c +8193 "$BACKING") "$WORK/after.img" ||
  fail "D: the backing device's data area differs from what the client wrote"
stop_server
