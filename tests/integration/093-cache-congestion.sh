#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 093-cache-congestion — a slow cache device makes reads bypass (bcache's
# congested_read_threshold_us); with the thresholds at 0 they don't.
# The cache device is fault,latency_us=5000:FILE: every cache I/O takes
# ≥ 5 ms. Warm-up: 4k random writes (writethrough: they go to the cache;
# 5 ms is under the 20 ms write threshold). Then 4k random reads of the
# same blocks, verified (fio --verify_only):
#  - bcache's read threshold (2000 us, --policy bcache; write congestion off, so every
#    warm-up write is cached): the cache reads are slower than
#    the threshold, the congestion score falls and reads bypass — in
#    cached_device.h's sense: hits are still read from the cache, but are
#    counted as cache_bypass_hits (and misses would not be inserted);
#  - --congested-read-threshold-us 0 --congested-write-threshold-us 0
#    --sequential-cutoff 0: nothing bypasses, every read is a cache hit.
source "$(dirname "$0")/lib.sh"


CACHE=$WORK/cache.img
BACKING=$WORK/backing.img
truncate -s 128M "$CACHE"
truncate -s 256M "$BACKING"

run_fio() {
  local label=$1; shift
  local json=$WORK/fio.${label//[^a-zA-Z0-9]/_}.json rc=0
  (cd "$WORK" && timeout 120 fio --output-format=json --output="$json" --ioengine=nbd --uri="$(nbd_uri)" \
    --verify_state_save=0 --name=ws --rw=randwrite --bs=4k --numjobs=1 --iodepth=16 --size=8M \
    --offset="$OFF" --randseed=77 --verify=crc32c --verify_fatal=1 "$@") 2>"$WORK/fio.stderr" || rc=$?
  [[ $rc -eq 0 ]] || fail "$label: fio exited $rc: $(tail -n 20 "$WORK/fio.stderr")"
  grep -qi 'verify.*fail\|bad magic\|crc32c.*mismatch\|bad header' "$WORK/fio.stderr" &&
    fail "$label: fio reported a verify failure: $(grep -i -m5 'verify\|magic\|crc\|header' "$WORK/fio.stderr")"
  server_alive "$label"
  OPS=$(python3 - "$json" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
if job["error"] != 0 or job["read"]["io_bytes"] + job["write"]["io_bytes"] == 0:
    print(f"job error {job['error']}", file=sys.stderr)
    sys.exit(1)
print(job["read"]["total_ios"])
EOF
  ) || fail "$label: fio reported errors"
}


SLOW="fault,latency_us=5000:$CACHE"

# ---- default thresholds: congested reads bypass ----
OFF=0
start_server --cache "$SLOW" --backing "$BACKING" --nbd "unix:$SOCK" --policy bcache
run_fio "warm (writes)" --do_verify=0
w=$OPS
((w == 0)) || fail "warm-up did reads"
stop_server
stats
((hits + misses + bhits + bmisses == 0)) || soft_fail "warm-up writes counted as reads"
# Writes at 5 ms are under the 20 ms write threshold, but on a loaded
# machine the real disk can add more than 15 ms to a few of them; those
# bypass, as they should. Only the read side below is asserted.
((bypassed == 0)) || echo "note: warm-up: $bypassed bytes of writes were slower than the write threshold and bypassed"

# Write congestion off here: on a loaded machine (CI runs two tests at once)
# some warm-up writes took over 20 ms, the write score fell, and 1344 of
# 2048 warm-up writes bypassed, so their reads missed. This part is about
# the read threshold; the write side is left at its default above.
start_server --cache "$SLOW" --backing "$BACKING" --nbd "unix:$SOCK" --policy bcache --congested-write-threshold-us 0
run_fio "warm (writes)" --do_verify=0
run_fio "slow reads" --verify_only=1
r=$OPS
((r == 2048)) || fail "expected 2048 verify reads, fio did $r"
stop_server
stats
((hits + misses + bhits + bmisses == r)) || soft_fail "counted $((hits + misses + bhits + bmisses)) reads, fio did $r"
((misses + bmisses == 0)) || soft_fail "warmed blocks missed the cache ($misses misses, $bmisses bypass misses)"
((bhits > 0 || bypassed > 0)) ||
  soft_fail "5 ms cache reads above the 2000 us threshold never bypassed: $hits hits, 0 bypass hits, 0 bypassed"
# Once congested, the score stays down: most reads bypass.
((bhits * 2 >= r)) || soft_fail "only $bhits of $r slow cache reads bypassed (want ≥ half)"

# ---- thresholds 0 (and cutoff 0): nothing bypasses ----
OFF=64M
start_server --cache "$SLOW" --backing "$BACKING" --nbd "unix:$SOCK" \
  --congested-read-threshold-us 0 --congested-write-threshold-us 0 --sequential-cutoff 0
run_fio "warm (writes), thresholds 0" --do_verify=0
run_fio "slow reads, thresholds 0" --verify_only=1
r=$OPS
stop_server
stats
((bhits == 0 && bmisses == 0 && bypassed == 0)) ||
  soft_fail "thresholds 0: reads bypassed ($bhits bypass hits, $bmisses bypass misses, $bypassed bytes bypassed)"
((hits == r && misses == 0)) || soft_fail "thresholds 0: $hits hits and $misses misses for $r reads of warmed blocks"

# Thresholds 0 with the default cutoff: 4k random reads do not bypass either.
start_server --cache "$SLOW" --backing "$BACKING" --nbd "unix:$SOCK" \
  --congested-read-threshold-us 0 --congested-write-threshold-us 0
run_fio "warm (writes), thresholds 0, default cutoff" --do_verify=0
run_fio "slow reads, thresholds 0, default cutoff" --verify_only=1
r=$OPS
stop_server
stats
((bhits == 0 && bmisses == 0)) || soft_fail "thresholds 0, default cutoff: random reads bypassed ($bhits/$bmisses)"
((hits == r)) || soft_fail "thresholds 0, default cutoff: $hits hits for $r reads of warmed blocks"
soft_fail_report
