#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 111-ctl-live — knobs set through `ubcache ctl` take effect on the next
# request, in the same daemon run:
#  - a 64 MiB sequential read (bs 1M, iodepth 4, as 092 measures it)
#    bypasses the cache at bcache's 4M cutoff (--policy bcache); after
#    `ctl set sequential_cutoff 0` the same read is cached (pass 1 all
#    misses, pass 2 all hits, nothing bypassed);
#  - writethrough caches a write (reading it back is a hit); after
#    `ctl set cache_mode writearound` a write is not cached (reading it back
#    is a miss); the data read back is right either way.
# Statistics come from `ctl get stats_total/...`, cleared between steps.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"
# Hits, not congestion: slow cache reads on a loaded machine would bypass.
NO_CONGESTION="--congested-read-threshold-us 0 --congested-write-threshold-us 0"

random_file "$WORK/backing.img" 96
truncate -s 128M "$WORK/backing.img"
truncate -s 256M "$WORK/cache.img"
start_server --cache "$WORK/cache.img" --backing "$WORK/backing.img" --nbd "unix:$SOCK" \
  --control "$CTL_SOCK" --policy bcache $NO_CONGESTION

MiB=$((1 << 20))
stat_of() { ctl get "stats_total/$1" || fail "ctl get stats_total/$1"; }

seq_read() {
  (cd "$WORK" && timeout 120 fio --output-format=json --output="$WORK/fio.json" --ioengine=nbd --uri="$(nbd_uri)" \
    --name=seq --rw=read --bs=1M --numjobs=1 --iodepth=4 --offset=16M --size=64M) 2>"$WORK/fio.stderr" ||
    fail "$1: fio failed: $(tail -n 20 "$WORK/fio.stderr")"
  server_alive "$1"
}

# ---- sequential_cutoff, live ----
seq_read "default cutoff"
bypassed=$(stat_of bypassed)
((bypassed >= 60 * MiB)) || fail "default cutoff: only $bypassed bytes bypassed of a 64 MiB sequential read"
ctl set sequential_cutoff 0 >/dev/null || fail "ctl set sequential_cutoff 0"
ctl clear-stats >/dev/null
seq_read "cutoff 0, pass 1"
seq_read "cutoff 0, pass 2"
bypassed=$(stat_of bypassed) hits=$(stat_of cache_hits) misses=$(stat_of cache_misses)
log "cutoff 0: bypassed $bypassed, hits $hits, misses $misses"
((bypassed == 0)) || fail "cutoff 0 set live: $bypassed bytes still bypassed"
((hits >= 64 && misses <= 64)) || fail "cutoff 0 set live: pass 2 was not served from the cache ($hits hits, $misses misses)"

# ---- cache_mode, live ----
write_then_read() {  # LABEL OFFSET PATTERN — sets DH and DM: hits/misses of the read back
  ctl clear-stats >/dev/null
  qio "$1: write" "write -P $3 $2 1M"
  qio "$1: read" "read -P $3 $2 1M"
  DH=$(stat_of cache_hits)
  DM=$(stat_of cache_misses)
  log "$1: read back after the write: $DH hits, $DM misses"
}
write_then_read writethrough 100M 0x5a
((DH == 1 && DM == 0)) || fail "writethrough: the written block was not cached ($DH hits, $DM misses)"
ctl set cache_mode writearound >/dev/null || fail "ctl set cache_mode writearound"
write_then_read writearound 110M 0xa5
((DH == 0 && DM == 1)) || fail "writearound set live: the write was cached ($DH hits, $DM misses)"
ctl set cache_mode writethrough >/dev/null
write_then_read "writethrough again" 120M 0x3c
((DH == 1 && DM == 0)) || fail "writethrough set back: the write was not cached ($DH hits, $DM misses)"
stop_server
