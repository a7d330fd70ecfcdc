#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 170-forget-cache — the way back for a backing device whose cache is lost
# (issue 30 item 4): `ubcache forget-cache SPEC`.
#  1. Writeback over a formatted 72 MiB backing file: block 0 written and
#     written back (0xa1, `ctl flush`); then, writeback stopped, block 0
#     overwritten (0xb2) and block 1 MiB written (0xc3), FLUSHed; show-super
#     says dirty with dirty_since inside the seconds of that write. kill -9,
#     and the cache file is taken away.
#  2. `serve --backing` alone refuses (exit 2, "dirty"). forget-cache
#     without --yes: exit 2, a report naming the state dirty, the
#     dirty_since time in UTC, fsck and "nothing changed"; the superblock
#     is byte for byte what it was.
#  3. forget-cache --yes: exit 0, "detached"; show-super state none, zero
#     set uuid, dirty_since 0, and bcache-tools agree (cache_state 0
#     [detached]). Served alone, block 0 reads 0xa1 (what writeback left)
#     and block 1 MiB zeros; forget-cache again says already detached.
#  4. A new formatted cache caches it again: served with it, block 0 is
#     still 0xa1. The lost cache, back after all, does not resurrect its
#     old dirty data: served with it, blocks 0 and 1 MiB read 0xa1 and
#     zeros, and the backing file still holds 0xa1 after it stopped.
#  5. A clean device: forget-cache reports nothing lost (exit 2 without
#     --yes), detaches with --yes.
#  6. Refusals: the cache device itself, an unformatted file (exit 2).
source "$(dirname "$0")/lib.sh"
command -v bcache-super-show >/dev/null || fail "bcache-super-show (bcache-tools) is not installed"
NO_CONGESTION="--congested-read-threshold-us 0 --congested-write-threshold-us 0"
ZERO_UUID=00000000-0000-0000-0000-000000000000

format_cache_backing 128M 72M
sb() { "$UBCACHE" show-super "$BACKING" | awk -v f="$1" '$1 == f {print $2}'; }
forget() { "$UBCACHE" forget-cache "$@" >"$WORK/forget.out" 2>"$WORK/forget.err"; }

# ---- 1: dirty data in a cache that is then lost ----
start_server --cache "$CACHE" --backing "$BACKING" --cache-mode writeback --nbd "unix:$SOCK" \
  --control "$CTL_SOCK" --sequential-cutoff 0 $NO_CONGESTION
qio "1 first version" "write -P 0xa1 0 4k"
timeout 60 "$UBCACHE" ctl --control "$CTL_SOCK" flush >/dev/null 2>&1 || fail "1: ctl flush"
[[ $(sb state) == clean ]] || fail "1: state $(sb state) after ctl flush, want clean"
[[ $(sb dirty_since) == 0 ]] || fail "1: dirty_since $(sb dirty_since) on a clean device, want 0"
ctl set writeback_running 0 >/dev/null
t0=$(date +%s)
qio "1 dirty writes" "write -P 0xb2 0 4k" "write -P 0xc3 1M 4k" "flush"
t1=$(date +%s)
[[ $(sb state) == dirty ]] || fail "1: state $(sb state) after dirty writes"
since=$(sb dirty_since)
((since >= t0 && since <= t1)) || fail "1: dirty_since $since not within [$t0, $t1]"
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""
mv "$CACHE" "$WORK/lost-cache.img"
log "1: dirty since $since ($(sb dirty_since_utc)); cache lost"

# ---- 2: refused alone; the report without --yes changes nothing ----
rc=0
timeout 20 "$UBCACHE" serve --backing "$BACKING" --nbd "unix:$WORK/alone.sock" >/dev/null 2>"$WORK/alone.err" || rc=$?
((rc == 2)) && grep -q dirty "$WORK/alone.err" || fail "2: serve of the dirty device alone: exit $rc, $(cat "$WORK/alone.err")"
before=$(head -c 8192 "$BACKING" | sha256sum)
rc=0
forget "$BACKING" || rc=$?
out=$(cat "$WORK/forget.out")
log "2: forget-cache without --yes, exit $rc:
$out"
((rc == 2)) || fail "2: forget-cache without --yes exited $rc, want 2"
expect_contains "$out" "state dirty" "2: the report"
expect_contains "$out" "$(sb dirty_since_utc)" "2: the report's time"
expect_contains "$out" "fsck" "2: the report"
expect_contains "$out" "nothing changed" "2: the report"
[[ $(head -c 8192 "$BACKING" | sha256sum) == "$before" ]] || fail "2: forget-cache without --yes wrote to the device"

# ---- 3: detached, served alone with what writeback left ----
rc=0
forget --yes "$BACKING" || rc=$?
((rc == 0)) || fail "3: forget-cache --yes exited $rc: $(cat "$WORK/forget.err" "$WORK/forget.out")"
expect_contains "$(cat "$WORK/forget.out")" "detached" "3: forget-cache --yes"
[[ $(sb state) == none && $(sb set_uuid) == "$ZERO_UUID" && $(sb dirty_since) == 0 ]] ||
  fail "3: after --yes: state $(sb state), set_uuid $(sb set_uuid), dirty_since $(sb dirty_since)"
bss=$(bcache-super-show "$BACKING" | awk '$1 == "dev.data.cache_state" {print $2, $3}')
[[ $bss == "0 [detached]" ]] || fail "3: bcache-super-show cache_state '$bss', want '0 [detached]'"
start_server --backing "$BACKING" --nbd "unix:$SOCK"
qio "3 alone: the written-back version" "read -P 0xa1 0 4k" "read -P 0 1M 4k"
stop_server
rc=0
forget "$BACKING" || rc=$?
((rc == 0)) && grep -q 'already detached' "$WORK/forget.out" ||
  fail "3: forget-cache on a detached device: exit $rc, $(cat "$WORK/forget.out" "$WORK/forget.err")"

# ---- 4: a new cache caches it again ----
truncate -s 128M "$WORK/cache2.img"
"$UBCACHE" format --cache "$WORK/cache2.img" >/dev/null 2>&1 || fail "4: format a new cache"
start_server --cache "$WORK/cache2.img" --backing "$BACKING" --nbd "unix:$SOCK" --control "$CTL_SOCK"
qio "4 with a new cache" "read -P 0xa1 0 4k" "read -P 0xa1 0 4k"
stop_server
log "4: state $(sb state) with the new cache"
start_server --cache "$WORK/lost-cache.img" --backing "$BACKING" --cache-mode writeback --nbd "unix:$SOCK" \
  --control "$CTL_SOCK"
qio "4 the lost cache, back" "read -P 0xa1 0 4k" "read -P 0 1M 4k"
timeout 60 "$UBCACHE" ctl --control "$CTL_SOCK" flush >/dev/null 2>&1 || fail "4: ctl flush with the lost cache"
stop_server
start_server --backing "$BACKING" --nbd "unix:$SOCK"
qio "4 nothing of the lost cache was written back" "read -P 0xa1 0 4k" "read -P 0 1M 4k"
stop_server

# ---- 5: a clean device loses nothing ----
truncate -s 64M "$WORK/c3.img" "$WORK/b3.img"
"$UBCACHE" format --cache "$WORK/c3.img" --backing "$WORK/b3.img" >/dev/null 2>&1 || fail "5: format"
rc=0
forget "$WORK/b3.img" || rc=$?
((rc == 2)) && grep -q 'nothing is lost' "$WORK/forget.out" ||
  fail "5: a clean device: exit $rc, $(cat "$WORK/forget.out" "$WORK/forget.err")"
forget --yes "$WORK/b3.img" || fail "5: --yes on a clean device: $(cat "$WORK/forget.err")"
[[ $("$UBCACHE" show-super "$WORK/b3.img" | awk '$1 == "state" {print $2}') == none ]] || fail "5: not detached"

# ---- 6: refusals ----
rc=0
forget --yes "$WORK/c3.img" || rc=$?
((rc == 2)) && grep -q 'cache device' "$WORK/forget.err" || fail "6: the cache device: exit $rc, $(cat "$WORK/forget.err")"
truncate -s 16M "$WORK/plain.img"
rc=0
forget --yes "$WORK/plain.img" || rc=$?
((rc == 2)) && grep -q 'no bcache backing superblock' "$WORK/forget.err" ||
  fail "6: an unformatted file: exit $rc, $(cat "$WORK/forget.err")"
log "ok: forget-cache"
