#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 112-ctl-detach — live detach and attach, and cache_mode persistence, on a
# cache and backing device formatted together (label "disk"):
#  - `ctl set cache_mode writearound` writes the backing superblock at once
#    (show-super), and a restart without --cache-mode comes back writearound;
#  - `ctl detach` (after its flush progress line) serves the export from the
#    backing device only: the superblock says state none with no set uuid,
#    cached reads neither hit nor miss, data written meanwhile is read back;
#  - `ctl attach` with another device is refused (exit 1) and changes
#    nothing; with the daemon's cache (by path, or by set uuid) it caches
#    again, the superblock says clean in its set again, and no stale data
#    from before the detach is ever read.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"
NO_CONGESTION="--congested-read-threshold-us 0 --congested-write-threshold-us 0"

CACHE=$WORK/cache.img
BACKING=$WORK/backing.img
truncate -s 256M "$CACHE"
truncate -s 64M "$BACKING"
"$UBCACHE" format --cache "$CACHE" --backing "$BACKING" --label disk >/dev/null 2>&1 || fail "format"
SET_UUID=$("$UBCACHE" show-super "$CACHE" | awk '$1 == "set_uuid" {print $2}')
sb() { "$UBCACHE" show-super "$BACKING" | awk -v f="$1" '$1 == f {print $2}'; }
[[ $(sb state) == clean && $(sb set_uuid) == "$SET_UUID" ]] || fail "format did not attach the backing device"
serve() {
  start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --control "$CTL_SOCK" \
    --sequential-cutoff 0 $NO_CONGESTION
}
stat_of() { ctl --device disk get "stats_total/$1" || fail "ctl get stats_total/$1"; }

# ---- cache_mode persists in the backing superblock ----
serve
ctl set cache_mode writearound >/dev/null || fail "ctl set cache_mode writearound"
[[ $(sb cache_mode) == writearound ]] || fail "the backing superblock says cache_mode $(sb cache_mode) after ctl set"
stop_server
serve
[[ $(ctl get cache_mode) == writearound ]] || fail "cache_mode after a restart: $(ctl get cache_mode), want writearound"
ctl set cache_mode writethrough >/dev/null

# ---- detach ----
# (qio's empty export name selects the first export, "disk")
qio "fill" "write -P 0x11 0 4M"
qio "cache it" "read -P 0x11 0 4M" "read -P 0x11 0 4M"
(($(stat_of cache_hits) > 0)) || fail "nothing was cached before the detach"
rc=0
out=$(ctl --device disk detach 2>"$WORK/detach.err") || rc=$?
((rc == 0)) || fail "ctl detach exited $rc: $(cat "$WORK/detach.err")"
grep -q "dirty left" "$WORK/detach.err" || fail "detach printed no flush progress line: $(cat "$WORK/detach.err")"
log "detach: $out"
[[ $(ctl --device disk get state) == "no cache" ]] || fail "state after detach: $(ctl get state)"
[[ $(sb state) == none && $(sb set_uuid) == 00000000-0000-0000-0000-000000000000 ]] ||
  fail "backing superblock after detach: state $(sb state), set_uuid $(sb set_uuid)"
h0=$(stat_of cache_hits) m0=$(stat_of cache_misses)
qio "detached read" "read -P 0x11 0 4M"
qio "detached write" "write -P 0x22 0 1M"
qio "detached read back" "read -P 0x22 0 1M" "read -P 0x11 1M 3M"
[[ $(stat_of cache_hits) == "$h0" && $(stat_of cache_misses) == "$m0" ]] ||
  fail "detached reads went through the cache (hits $h0 -> $(stat_of cache_hits), misses $m0 -> $(stat_of cache_misses))"
rc=0
ctl --device disk detach >/dev/null 2>&1 || rc=$?
((rc == 1)) || fail "a second detach exited $rc, want 1"

# ---- attach ----
rc=0
err=$(ctl --device disk attach /dev/null 2>&1) || rc=$?
((rc == 1)) && grep -q "is not this daemon's cache set" <<<"$err" || fail "attach of another device: exit $rc: $err"
[[ $(ctl --device disk get state) == "no cache" ]] || fail "a refused attach attached"
ctl --device disk attach "$SET_UUID" >/dev/null || fail "attach by set uuid"
[[ $(ctl --device disk get state) == clean ]] || fail "state after attach: $(ctl get state)"
[[ $(sb state) == clean && $(sb set_uuid) == "$SET_UUID" ]] ||
  fail "backing superblock after attach: state $(sb state), set_uuid $(sb set_uuid)"
# Block 0 was rewritten while detached: the old cached copy must never come back.
qio "attached read" "read -P 0x22 0 1M" "read -P 0x11 1M 3M"
qio "attached re-read" "read -P 0x22 0 1M" "read -P 0x11 1M 3M"
h1=$(stat_of cache_hits)
((h1 > h0)) || fail "after attach nothing is cached again ($h0 -> $h1 hits)"
stop_server
