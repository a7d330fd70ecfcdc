#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 176-auto-sync-writes — as shipped (the auto policies), in writeback over
# the SAS model, a sync write never goes around the cache: a journal's
# writes would otherwise stall every fsync behind the spindle (issue 29,
# item 5: the tuning suite's sysbench case lost a tenth to it). Sync is what
# NBD carries: FUA, a write right after a FLUSH, and the writes of a stream
# that had one within 500 ms (a journal's log blocks, whose commit records
# follow a FLUSH once a loop device or nbdfuse has turned FUA into FLUSHes).
#
# A 64 MiB cache is filled by a 96 MiB sequential read (admitted while it
# has space to spare, then bypassing: no space to spare from then on).
# Then streams of 64 KiB sequential writes, each at a new offset:
#  1. 8 MiB plain: past its first 4 MiB it bypasses (bypasses/write grows)
#     — the policy works, so what follows is a real test;
#  2. 12 MiB with a FLUSH after every 4th write (fio --fsync=4, a journal's
#     shape): nothing bypasses (sequential_bypasses and every bypasses/*
#     counter unchanged), all 12 MiB are dirty in the cache (below
#     cutoff_writeback: the cache is 64 MiB);
#  3. 16 MiB, every write FUA (qemu-io write -f): nothing bypasses
#     (bypasses/write_fua 0).
# The export then reads back what was written (qemu-io read -P).
# ctest: run alone
# (the auto policies' service-time picture is timing: beside another test a
# plain write can meet auto congestion and bypass — seen once at load ~20)
source "$(dirname "$0")/lib.sh"

MiB=$((1 << 20))
format_cache_backing 64M 512M
start_server --cache "$CACHE" --backing "sas:$BACKING" --cache-mode writeback --bucket-size 128k \
  --nbd "unix:$SOCK" --control "$CTL_SOCK"
ctl set writeback_running 0 >/dev/null  # dirty data stays where the writes put it

counters() {
  local k out=""
  for k in sequential_bypasses bypasses/read bypasses/write bypasses/write_fua bypasses/write_after_flush; do
    out+="$k=$(ctl get "$k") "
  done
  echo "$out"
}
get() { ctl get "$1"; }

# ---- fill: no space to spare ----
run_fio "fill" --name=fill --rw=read --bs=1M --offset=0 --size=96M
log "after the fill: $(counters)"
(($(get sequential_bypasses) > 0)) || fail "fill: a 96 MiB stream into a 64 MiB cache never bypassed"

# ---- 1: a plain stream bypasses ----
w0=$(get bypasses/write)
run_fio "1 plain stream" --name=plain --rw=write --bs=64k --offset=128M --size=8M
log "1: $(counters)"
(($(get bypasses/write) > w0 + 32)) ||
  fail "1: a plain 8 MiB write stream with no space to spare bypassed $(($(get bypasses/write) - w0)) writes, want > 32"

# ---- 2: a journal's shape: a FLUSH after every 4th write ----
before=$(counters)
d0=$(get dirty_data)
run_fio "2 flushed stream" --name=journal --rw=write --bs=64k --offset=192M --size=12M --fsync=4
after=$(counters)
log "2: $after; dirty $d0 -> $(get dirty_data)"
[[ $after == "$before" ]] || fail "2: writes of a stream with a FLUSH every 4 writes went around the cache: $before -> $after"
(($(get dirty_data) - d0 == 12 * MiB)) || fail "2: dirty data grew by $(($(get dirty_data) - d0)), want 12 MiB"

# ---- 3: FUA writes ----
cmds=()
for ((i = 0; i < 256; i++)); do cmds+=("write -f -q -P 0x5a $((256 * MiB + i * 65536)) 64k"); done
qio "3 FUA stream" "${cmds[@]}"
log "3: $(counters)"
[[ $(get bypasses/write_fua) == 0 ]] || fail "3: $(get bypasses/write_fua) FUA writes went around the cache"
[[ $(get bypasses/write_after_flush) == 0 ]] || fail "$(get bypasses/write_after_flush) writes after a FLUSH went around the cache"

qio "read back" "read -q -P 0x5a $((256 * MiB)) 16M"
server_alive "the end"
log OK
