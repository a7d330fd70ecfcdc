#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 092-cache-cutoff — bcache's sequential cutoff:
#  - bcache's default (4M, --policy bcache): a 64 MiB sequential read (bs 1M, one job, iodepth 4)
#    bypasses the cache once its stream reaches 4 MiB: the statistics show
#    bypassed ≥ 60 MiB, ≥ 60 bypass misses and at most 4 cached misses;
#    a second read of the same range is bypassed again (it was not cached);
#  - --sequential-cutoff 0: the same read is cached, and a second identical
#    read is all hits with nothing bypassed.
# Each read is also checked against the backing file's contents.
source "$(dirname "$0")/lib.sh"
# This test is about hits and the cutoff, not congestion: on a loaded CI
# machine cache reads can exceed 2 ms and would turn hits into bypass hits.
NO_CONGESTION="--congested-read-threshold-us 0 --congested-write-threshold-us 0"


CACHE=$WORK/cache.img
BACKING=$WORK/backing.img
truncate -s 256M "$CACHE"
random_file "$BACKING" 96
truncate -s 128M "$BACKING"

# seq_read LABEL — 64 MiB from 16 MiB on, sequential, bs 1M, iodepth 4;
# sets OPS. Afterwards the data is compared with the backing file.
seq_read() {
  local label=$1
  local json=$WORK/fio.${label//[^a-zA-Z0-9]/_}.json rc=0
  (cd "$WORK" && timeout 120 fio --output-format=json --output="$json" --ioengine=nbd --uri="$(nbd_uri)" \
    --name=seq --rw=read --bs=1M --numjobs=1 --iodepth=4 --offset=16M --size=64M) \
    2>"$WORK/fio.stderr" || rc=$?
  [[ $rc -eq 0 ]] || fail "$label: fio exited $rc: $(tail -n 20 "$WORK/fio.stderr")"
  server_alive "$label"
  OPS=$(python3 - "$json" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
if job["error"] != 0 or job["read"]["io_bytes"] != 64 << 20:
    print(f"job error {job['error']}, read {job['read']['io_bytes']} bytes", file=sys.stderr)
    sys.exit(1)
print(job["read"]["total_ios"])
EOF
  ) || fail "$label: fio reported errors"
}


# compare LABEL — the whole export, read with nbdcopy, equals the backing file.
compare() {
  rm -f "$WORK/copy.img"
  timeout 60 nbdcopy "$(nbd_uri)" "$WORK/copy.img" || fail "$1: nbdcopy failed"
  cmp -s "$WORK/copy.img" "$BACKING" ||
    fail "$1: data read through the export differs from the backing file: $(cmp "$WORK/copy.img" "$BACKING" 2>&1 | head -n 1)"
  rm -f "$WORK/copy.img"
}

MiB=$((1 << 20))

# ---- default cutoff ----
start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --policy bcache
seq_read "default cutoff"
((OPS == 64)) || fail "expected 64 reads of 1 MiB, fio did $OPS"
stop_server
stats
((bypassed >= 60 * MiB)) || soft_fail "default cutoff: only $bypassed bytes bypassed of a 64 MiB sequential read (want ≥ 60 MiB)"
((bmisses >= 60)) || soft_fail "default cutoff: $bmisses bypass misses (want ≥ 60 of 64 reads)"
((misses <= 4 && hits == 0)) || soft_fail "default cutoff: $misses misses / $hits hits counted as cached (want ≤ 4 / 0)"

# The bypassed range was not cached: reading it again bypasses again.
start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --policy bcache
seq_read "default cutoff, pass 1"
seq_read "default cutoff, pass 2"
stop_server
stats
((bypassed >= 120 * MiB)) || soft_fail "default cutoff, two passes: bypassed $bypassed bytes (want ≥ 120 MiB)"
((hits <= 4)) || soft_fail "default cutoff, two passes: $hits hits, but the bypassed reads must not have been cached"

# ---- --sequential-cutoff 0 ----
start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --sequential-cutoff 0 $NO_CONGESTION
seq_read "cutoff 0, pass 1"
p1=$OPS
seq_read "cutoff 0, pass 2"
p2=$OPS
stop_server
stats
((bypassed == 0 && bhits == 0 && bmisses == 0)) ||
  soft_fail "cutoff 0: the read was bypassed (bypassed $bypassed bytes, $bhits bypass hits, $bmisses bypass misses)"
((misses == p1)) || soft_fail "cutoff 0: $misses misses for the $p1 reads of pass 1 (want all of them)"
((hits == p2)) || soft_fail "cutoff 0: $hits hits for the $p2 reads of pass 2 (want all of them)"
((colls == 0)) || soft_fail "cutoff 0: $colls miss collisions without any writes"

# Data check: the cached copy is right (reads through the cache, cutoff 0
# so nbdcopy's reads are cached and then hit).
start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --sequential-cutoff 0 $NO_CONGESTION
compare "cutoff 0, cold"
compare "cutoff 0, cached"
stop_server
stats
((hits > 0)) || soft_fail "cutoff 0: the second nbdcopy got no cache hits"
start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --policy bcache
compare "default cutoff"
stop_server
soft_fail_report
