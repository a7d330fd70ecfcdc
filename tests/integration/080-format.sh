#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 080-format — `ubcache format` and `show-super` against files, checked with
# bcache-tools in both directions: bcache-super-show reads the backing
# superblock we write (label, data offset, cache mode, state, checksum
# match), and our show-super reads what make-bcache -B writes and refuses
# make-bcache -C. Without --force an existing superblock is never
# overwritten; a corrupt one is reported by its failed check with exit 2.
source "$(dirname "$0")/lib.sh"

command -v bcache-super-show >/dev/null && command -v make-bcache >/dev/null ||
  fail "bcache-tools missing (scripts/install-deps installs it)"

cache=$WORK/cache.img
backing=$WORK/backing.img
truncate -s 256M "$cache"
truncate -s 128M "$backing"

# run_expect STATUS OUTFILE CMD... — run CMD (stdout+stderr to OUTFILE), assert its exit status.
run_expect() {
  local want=$1 out=$2 rc=0
  shift 2
  "$@" >"$out" 2>&1 || rc=$?
  [[ $rc -eq $want ]] || fail "expected exit $want, got $rc from: $* :
$(cat "$out")"
}
# field FILE NAME — the value of a `name value` line.
field() { awk -v n="$2" '$1 == n { sub(/^[^ ]+ /, ""); print; exit }' "$1"; }
expect_field() {
  local got
  got=$(field "$1" "$2")
  [[ $got == "$3" ]] || fail "$1: field $2 is '$got', expected '$3':
$(cat "$1")"
}

# --- Client data beyond data_offset survives formatting the backing device.
dd if=/dev/urandom of="$WORK/payload" bs=1M count=4 status=none
dd if="$WORK/payload" of="$backing" bs=1M seek=1 conv=notrunc status=none

# --- Format both in one call: attached, the backing carries the cache's set uuid.
run_expect 0 "$WORK/format.out" "$UBCACHE" format --cache "$cache" --backing "$backing" \
  --label disk0 --cache-mode writeback --data-offset 64k
log "$(cat "$WORK/format.out")"
expect_contains "$(cat "$WORK/format.out")" "zeroing $cache journal and metadata" "format summary"

run_expect 0 "$WORK/cache.super" "$UBCACHE" show-super "$cache"
expect_field "$WORK/cache.super" kind cache
expect_field "$WORK/cache.super" version 1
expect_field "$WORK/cache.super" label disk0
expect_field "$WORK/cache.super" block_size 4096
expect_field "$WORK/cache.super" bucket_size 524288
expect_field "$WORK/cache.super" nbuckets 512
expect_field "$WORK/cache.super" first_bucket 2
expect_field "$WORK/cache.super" journal_buckets 8
expect_field "$WORK/cache.super" cache_mode writeback
expect_field "$WORK/cache.super" clean yes
expect_field "$WORK/cache.super" btree_root_bucket 0
for f in csum uuid set_uuid flags seq feature_compat feature_ro_compat feature_incompat \
  btree_root_offset btree_root_level created data_bucket; do
  [[ -n $(field "$WORK/cache.super" $f) ]] || fail "show-super of the cache lacks $f"
done
set_uuid=$(field "$WORK/cache.super" set_uuid)
[[ $set_uuid =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]] ||
  fail "set_uuid '$set_uuid' is not 8-4-4-4-12 hex"

run_expect 0 "$WORK/backing.super" "$UBCACHE" show-super "$backing"
expect_field "$WORK/backing.super" kind backing
expect_field "$WORK/backing.super" version 4
expect_field "$WORK/backing.super" label disk0
expect_field "$WORK/backing.super" cache_mode writeback
expect_field "$WORK/backing.super" state clean
expect_field "$WORK/backing.super" set_uuid "$set_uuid"
expect_field "$WORK/backing.super" data_offset 65536
expect_field "$WORK/backing.super" data_offset_sectors 128

# JSON carries the same fields.
run_expect 0 "$WORK/backing.json" "$UBCACHE" show-super --json "$backing"
python3 - "$WORK/backing.json" "$set_uuid" <<'EOF' || fail "show-super --json: $(cat "$WORK/backing.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "backing" and d["label"] == "disk0" and d["data_offset"] == 65536, d
assert d["set_uuid"] == sys.argv[2] and d["state"] == "clean", d
EOF

# --- bcache-tools reads our backing superblock.
bcache-super-show "$backing" >"$WORK/bss.out" 2>&1 || fail "bcache-super-show failed: $(cat "$WORK/bss.out")"
bss=$(cat "$WORK/bss.out")
log "bcache-super-show: $(tr '\n' ' ' <<<"$bss")"
grep -qE '^sb\.magic[[:space:]]+ok' <<<"$bss" || fail "bcache-super-show: magic not ok: $bss"
grep -qE '^sb\.first_sector[[:space:]]+8 \[match\]' <<<"$bss" || fail "bcache-super-show: first_sector: $bss"
grep -qE '^sb\.csum[[:space:]]+[0-9A-F]+ \[match\]' <<<"$bss" || fail "bcache-super-show: checksum mismatch: $bss"
grep -qE '^sb\.version[[:space:]]+4 \[backing device\]' <<<"$bss" || fail "bcache-super-show: version: $bss"
grep -qE '^dev\.label[[:space:]]+disk0$' <<<"$bss" || fail "bcache-super-show: label: $bss"
grep -qE '^dev\.data\.first_sector[[:space:]]+128$' <<<"$bss" || fail "bcache-super-show: data offset: $bss"
grep -qE '^dev\.data\.cache_mode[[:space:]]+1 \[writeback\]' <<<"$bss" || fail "bcache-super-show: cache mode: $bss"
grep -qE '^dev\.data\.cache_state[[:space:]]+1 \[clean\]' <<<"$bss" || fail "bcache-super-show: state: $bss"
grep -qE "^cset\.uuid[[:space:]]+$set_uuid\$" <<<"$bss" || fail "bcache-super-show: cset uuid: $bss"

# Formatting the backing device zeroed only what precedes data_offset.
cmp <(dd if="$backing" bs=1M skip=1 count=4 status=none) "$WORK/payload" ||
  fail "client data past data_offset changed by format"
[[ $(dd if="$backing" bs=4096 count=1 status=none | tr -d '\0' | wc -c) -eq 0 ]] ||
  fail "bytes 0..4095 of the backing device not zeroed"

# --- A detached backing device with each cache mode, read by bcache-super-show.
# bcache-super-show's names for modes 0-3.
bss_names=(writethrough writeback writearound "no caching")
i=0
for mode in writethrough writeback writearound none; do
  img=$WORK/mode.img
  rm -f "$img"
  truncate -s 16M "$img"
  run_expect 0 "$WORK/mode.out" "$UBCACHE" format --backing "$img" --cache-mode $mode --label "m-$mode"
  bcache-super-show "$img" >"$WORK/mode.bss" 2>&1 || fail "bcache-super-show ($mode): $(cat "$WORK/mode.bss")"
  grep -qE "^dev\.data\.cache_mode[[:space:]]+$i \[${bss_names[$i]}\]" "$WORK/mode.bss" ||
    fail "bcache-super-show cache mode for $mode: $(cat "$WORK/mode.bss")"
  grep -qE '^dev\.data\.cache_state[[:space:]]+0 \[detached\]' "$WORK/mode.bss" ||
    fail "a backing device formatted alone should be detached: $(cat "$WORK/mode.bss")"
  grep -qE '^dev\.data\.first_sector[[:space:]]+16$' "$WORK/mode.bss" ||
    fail "default data offset should be sector 16: $(cat "$WORK/mode.bss")"
  i=$((i + 1))
done

# --- make-bcache -B output is accepted; make-bcache -C is refused by name.
mb=$WORK/mb-backing.img
truncate -s 64M "$mb"
make-bcache -B "$mb" >"$WORK/mb.out" 2>&1 || fail "make-bcache -B: $(cat "$WORK/mb.out")"
mb_uuid=$(awk '/^UUID:/ { print $2 }' "$WORK/mb.out")
run_expect 0 "$WORK/mb.super" "$UBCACHE" show-super "$mb"
expect_field "$WORK/mb.super" kind backing
expect_field "$WORK/mb.super" version 1
expect_field "$WORK/mb.super" uuid "$mb_uuid"
expect_field "$WORK/mb.super" data_offset 8192
expect_field "$WORK/mb.super" state none

mbo=$WORK/mb-offset.img
truncate -s 64M "$mbo"
make-bcache -B --data-offset 2048 "$mbo" >"$WORK/mbo.out" 2>&1 || fail "make-bcache -B -o: $(cat "$WORK/mbo.out")"
run_expect 0 "$WORK/mbo.super" "$UBCACHE" show-super "$mbo"
expect_field "$WORK/mbo.super" version 4
expect_field "$WORK/mbo.super" data_offset 1048576

mbc=$WORK/mb-cache.img
truncate -s 64M "$mbc"
make-bcache -C "$mbc" >"$WORK/mbc.out" 2>&1 || fail "make-bcache -C: $(cat "$WORK/mbc.out")"
run_expect 2 "$WORK/mbc.err" "$UBCACHE" show-super "$mbc"
expect_contains "$(cat "$WORK/mbc.err")" "a bcache cache device (version" "show-super of make-bcache -C"
expect_contains "$(cat "$WORK/mbc.err")" "not supported" "show-super of make-bcache -C"

# --- Without --force an existing superblock is never overwritten.
before=$(sha256sum <"$cache")
run_expect 1 "$WORK/refuse.err" "$UBCACHE" format --cache "$cache"
cache_uuid=$(field "$WORK/cache.super" uuid)
expect_contains "$(cat "$WORK/refuse.err")" \
  "$cache already holds a ubcache cache superblock (uuid $cache_uuid" "refusal message"
expect_contains "$(cat "$WORK/refuse.err")" "use --force to overwrite" "refusal message"
[[ $(sha256sum <"$cache") == "$before" ]] || fail "refused format still changed the cache file"

run_expect 1 "$WORK/refuse2.err" "$UBCACHE" format --backing "$mb"
expect_contains "$(cat "$WORK/refuse2.err")" "$mb already holds a bcache backing superblock (uuid $mb_uuid" \
  "refusal message for make-bcache's backing device"
run_expect 1 "$WORK/refuse3.err" "$UBCACHE" format --cache "$mbc"
expect_contains "$(cat "$WORK/refuse3.err")" "already holds a bcache cache device superblock" \
  "refusal message for make-bcache's cache device"
# A pair is checked as a whole: the blank one is not formatted either.
blank=$WORK/blank.img
truncate -s 64M "$blank"
run_expect 1 "$WORK/refuse4.err" "$UBCACHE" format --cache "$blank" --backing "$backing"
run_expect 2 "$WORK/blank.err" "$UBCACHE" show-super "$blank"
expect_contains "$(cat "$WORK/blank.err")" "no ubcache/bcache superblock" "blank device after a refused pair"

# --force overwrites, with a new identity.
run_expect 0 "$WORK/force.out" "$UBCACHE" format --cache "$cache" --force --bucket-size 1M
expect_contains "$(cat "$WORK/force.out")" "overwriting a ubcache cache superblock" "--force notice"
run_expect 0 "$WORK/cache2.super" "$UBCACHE" show-super "$cache"
expect_field "$WORK/cache2.super" bucket_size 1048576
[[ $(field "$WORK/cache2.super" uuid) != "$cache_uuid" ]] || fail "--force kept the old uuid"
run_expect 0 "$WORK/force2.out" "$UBCACHE" format --backing "$mb" --force --label again
bcache-super-show "$mb" | grep -qE '^dev\.label[[:space:]]+again$' || fail "--force over make-bcache -B"

# --- Corruption: the failed check is named, exit 2.
cp "$cache" "$WORK/bad.img"
printf '\xff' | dd of="$WORK/bad.img" bs=1 seek=$((4096 + 200)) conv=notrunc status=none
run_expect 2 "$WORK/bad.err" "$UBCACHE" show-super "$WORK/bad.img"
expect_contains "$(cat "$WORK/bad.err")" "superblock: bad csum" "corrupt cache superblock"

cp "$cache" "$WORK/bad.img"
printf '\x00' | dd of="$WORK/bad.img" bs=1 seek=$((4096 + 3)) conv=notrunc status=none
run_expect 2 "$WORK/bad.err" "$UBCACHE" show-super "$WORK/bad.img"
expect_contains "$(cat "$WORK/bad.err")" "superblock: bad magic" "damaged cache magic"
# format treats a damaged superblock as a superblock.
run_expect 1 "$WORK/bad.err" "$UBCACHE" format --cache "$WORK/bad.img"
expect_contains "$(cat "$WORK/bad.err")" "already holds a damaged superblock" "format over damaged magic"

cp "$cache" "$WORK/bad.img"
printf '\x02' | dd of="$WORK/bad.img" bs=1 seek=$((4096 + 24)) conv=notrunc status=none
run_expect 2 "$WORK/bad.err" "$UBCACHE" show-super "$WORK/bad.img"
expect_contains "$(cat "$WORK/bad.err")" "superblock: bad version 2" "future cache version"

cp "$backing" "$WORK/bad.img"
printf 'X' | dd of="$WORK/bad.img" bs=1 seek=$((4096 + 72)) conv=notrunc status=none
run_expect 2 "$WORK/bad.err" "$UBCACHE" show-super "$WORK/bad.img"
expect_contains "$(cat "$WORK/bad.err")" "superblock: bad csum" "corrupt backing superblock"
bcache-super-show "$WORK/bad.img" 2>&1 | grep -q 'sb.csum.*\[match\]' &&
  fail "bcache-super-show should see the same checksum mismatch"

# --- Bad input: exit 2 with one line.
run_expect 2 "$WORK/usage.err" "$UBCACHE" format
expect_contains "$(cat "$WORK/usage.err")" "--cache SPEC and/or --backing SPEC is required" "no device"
run_expect 2 "$WORK/usage.err" "$UBCACHE" format --cache "$blank" --bucket-size 3k
expect_contains "$(cat "$WORK/usage.err")" "bucket size not a power of two" "bad bucket size"
run_expect 2 "$WORK/usage.err" "$UBCACHE" format --cache "$blank" --cache-mode writeforward
run_expect 2 "$WORK/usage.err" "$UBCACHE" format --cache mem:xyz
run_expect 2 "$WORK/usage.err" "$UBCACHE" format --cache "$WORK/tiny.img" # does not exist
truncate -s 4M "$WORK/tiny.img"
run_expect 2 "$WORK/usage.err" "$UBCACHE" format --cache "$WORK/tiny.img"
expect_contains "$(cat "$WORK/usage.err")" "no room for data buckets" "cache too small"
run_expect 2 "$WORK/usage.err" "$UBCACHE" format --backing "$blank" --data-offset 6k
run_expect 2 "$WORK/usage.err" "$UBCACHE" show-super
exit 0
