#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 095-cache-warm-restart — a formatted cache survives a clean restart:
#  A. format cache + backing, serve, read a 64 MiB random working set once
#     (fio randread 4k, every block once), SIGTERM: a clean shutdown.
#  B. serve again: the start is warm and read only the superblock, the
#     bucket table and one root node per index shard (asserted from the
#     startup log line: at most 16 node reads, < 2 MiB); the same pass is
#     >= 99% hits.
#  C. writethrough, kill -9 after overwriting part of the cached range:
#     the restart recovers (warm: the journal is replayed, not cold) and
#     every byte read through the cache equals the backing device (cmp of
#     the whole export against the backing file's data area), the
#     overwritten data is the new data, and the re-read hits the cache.
#  D. the backing device served alone (no --cache) is detached from the
#     set, so data written that way is never hidden by old cached copies.
#  E. an unformatted --cache still works (cold every run) and says so; a
#     corrupt cache superblock is a clear error, and nothing is overwritten.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"
NO_CONGESTION="--congested-read-threshold-us 0 --congested-write-threshold-us 0"

M=$((1 << 20))
format_cache_backing 256M 256M
# Client data starts at the backing superblock's data_offset (8 KiB).
dd if=/dev/urandom of="$BACKING" bs=8k seek=1 count=$((96 * M / 8192)) conv=notrunc status=none

serve() { start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" $NO_CONGESTION "$@"; }

# pass LABEL — one randread pass over the working set; sets OPS.
pass() {
  local json=$WORK/fio.${1// /_}.json rc=0
  (cd "$WORK" && timeout 200 fio --output-format=json --output="$json" --ioengine=nbd --uri="$(nbd_uri)" \
    --name=ws --rw=randread --bs=4k --iodepth=16 --randrepeat=1 --randseed=95 \
    --offset=16M --size=64M --io_size=64M) 2>"$WORK/fio.stderr" || rc=$?
  [[ $rc -eq 0 ]] || fail "$1: fio exited $rc: $(tail -n 20 "$WORK/fio.stderr")"
  OPS=$(python3 -c "
import json, sys
t = open(sys.argv[1]).read(); j = json.loads(t[t.index('{'):])['jobs'][0]
assert j['error'] == 0
print(j['read']['total_ios'])" "$json") || fail "$1: fio reported errors"
}

# startup_line — the cache set's startup log line of the last server.
startup_line() { grep -E "cache set .* (warm|cold) start" "$SERVER_LOG" | tail -n 1; }

# ---- A: first pass, clean shutdown ----
serve
startup_line | grep -q "cold start" || fail "A: the first start was not cold: $(startup_line)"
pass "A pass 1"
stop_server
stats
log "A: pass 1: $OPS reads, $hits hits, $misses misses"
((OPS == 16384)) || fail "A: expected 16384 reads, got $OPS"
grep -q "clean shutdown" "$SERVER_LOG" || fail "A: no clean shutdown logged"
"$UBCACHE" show-super "$CACHE" | grep -qE '^clean yes$' || fail "A: cache superblock not clean after SIGTERM"

# ---- B: warm restart ----
serve
line=$(startup_line)
log "B: $line"
grep -q "warm start" <<<"$line" || fail "B: the restart after SIGTERM was not warm: $line"
"$UBCACHE" show-super "$CACHE" | grep -qE '^clean no$' || fail "B: clean flag not cleared while serving"
read -r bytes nodes <<<"$(sed -E 's/.* read ([0-9]+) bytes \([^:]*: ([0-9]+) node reads.*/\1 \2/' <<<"$line")"
[[ $bytes =~ ^[0-9]+$ && $nodes =~ ^[0-9]+$ ]] || fail "B: cannot parse the startup line: $line"
log "B: startup read $bytes bytes, $nodes node reads"
((nodes <= 16)) || fail "B: startup read $nodes nodes (more than one root per shard: an index walk)"
((bytes < 2 * M)) || fail "B: startup read $bytes bytes (>= 2 MiB)"
pass "B pass 2"
stop_server
stats
log "B: pass 2: $OPS reads, $hits hits, $misses misses"
((hits * 100 >= OPS * 99)) || fail "B: warm pass was $hits hits of $OPS reads (< 99%)"

# ---- C: kill -9 in writethrough ----
serve --cache-mode writethrough
startup_line | grep -q "warm start" || fail "C: start not warm: $(startup_line)"
pass "C warm-up"
# Overwrite 4 MiB inside the cached range (new data in both devices).
dd if=/dev/urandom of="$WORK/new.bin" bs=1M count=4 status=none
qio "C: overwrite" "write -q -s $WORK/new.bin $((20 * M)) $((4 * M))"
sleep 1.5  # let housekeeping commit the journal: a replay would find it
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""
serve --cache-mode writethrough
line=$(startup_line)
log "C: after kill -9: $line"
grep -q "warm start" <<<"$line" || fail "C: the start after kill -9 was not warm: $line"
grep -q "recovered after a crash" "$SERVER_LOG" || fail "C: no crash recovery in the log"
pass "C pass after the crash"
nbdcopy "$(nbd_uri)" "$WORK/export.img" || fail "C: nbdcopy failed"
stop_server
stats
log "C: the working set after the crash: $OPS reads, $hits hits"
# 4 of its 64 MiB were overwritten (writethrough caches them too).
((hits * 100 >= OPS * 90)) || fail "C: only $hits of $OPS reads hit after the crash: not warm"
cmp <(tail -c +8193 "$BACKING") "$WORK/export.img" || fail "C: data read through the cache differs from the backing device"
cmp <(tail -c +$((20 * M + 8193)) "$BACKING" | head -c $((4 * M))) "$WORK/new.bin" ||
  fail "C: the overwritten range does not hold the new data"

# ---- D: served without the cache: detached, so the cache starts it cold ----
serve  # warm the cache for the range again
pass "D warm-up"
stop_server
start_server --backing "$BACKING" --nbd "unix:$SOCK"
grep -q "detached from cache set" "$SERVER_LOG" || fail "D: serving without the cache did not detach"
dd if=/dev/urandom of="$WORK/new2.bin" bs=1M count=1 status=none
qio "D: overwrite without the cache" "write -q -s $WORK/new2.bin $((30 * M)) $M"
stop_server
"$UBCACHE" show-super "$BACKING" | grep -qE '^state (none|detached)' ||
  fail "D: backing not detached: $("$UBCACHE" show-super "$BACKING" | grep -E '^state')"
serve
grep -q "attached to cache set" "$SERVER_LOG" || fail "D: the backing device was not attached again"
nbdcopy "$(nbd_uri)" "$WORK/export2.img" || fail "D: nbdcopy failed"
stop_server
cmp <(tail -c +$((30 * M + 8193)) "$BACKING" | head -c $M) "$WORK/new2.bin" || fail "D: bad test setup"
cmp <(tail -c +8193 "$BACKING") "$WORK/export2.img" ||
  fail "D: the cache served data older than what was written without it"

# ---- E: unformatted cache; corrupt cache superblock ----
PLAIN=$WORK/plain.img
truncate -s 128M "$PLAIN"
start_server --cache "$PLAIN" --backing "$BACKING" --nbd "unix:$SOCK"
grep -q "warm restart needs \`ubcache format --cache\`" "$SERVER_LOG" || fail "E: no hint for an unformatted cache"
stop_server
printf '\xff' | dd of="$CACHE" bs=1 seek=$((4096 + 130)) conv=notrunc status=none
cp "$CACHE" "$WORK/corrupt.img"
rc=0
"$UBCACHE" serve --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" 2>"$WORK/corrupt.err" || rc=$?
((rc == 2)) || fail "E: serve on a corrupt cache superblock exited $rc (expected 2)"
expect_contains "$(cat "$WORK/corrupt.err")" "bad csum" "E: corrupt superblock message"
cmp "$CACHE" "$WORK/corrupt.img" || fail "E: serve wrote to a cache whose superblock it refused"
log "ok"
