#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 090-cache-verify — data integrity through the cache (serve --cache) in
# each of writethrough, writearound and none:
#  - fio's nbd engine: 4 connections, random writes of mixed sizes 4k..1M
#    with crc32c verify headers, each job in its own slice, read back and
#    verified; then verified again (in writearound the first verify filled
#    the cache, so the second one reads hits);
#  - qemu-io pattern tests that make a cached copy stale on purpose:
#    cache a range, overwrite it (plain, write-zeroes, discard), read back;
#  - restart the server on the same cache and backing files (both
#    formatted: the restart after SIGTERM is warm, the index and its cached
#    data come back) and verify everything written before, twice.
# Every mode gets its own 256 MiB region of one backing file; at the end one
# more server verifies all three regions, so no mode's run damaged another's.
# ctest: label sanitized
# ctest: cost 120
source "$(dirname "$0")/lib.sh"

M=$((1 << 20))
format_cache_backing 256M 768M




# stats — the server's last "export 'ubcache': cache_hits ..." line as
# shell variables hits, misses, bhits, bmisses.
stats() {
  local line
  line=$(grep -E "export 'ubcache': cache_hits" "$SERVER_LOG" | tail -n 1) ||
    fail "no statistics line in $SERVER_LOG"
  log "stats: ${line#*export }"
  eval "$(sed -E 's/.*cache_hits ([0-9]+) cache_misses ([0-9]+) .*cache_bypass_hits ([0-9]+) cache_bypass_misses ([0-9]+) .*/hits=\1 misses=\2 bhits=\3 bmisses=\4/' <<<"$line")"
  [[ -n ${hits:-} && $hits =~ ^[0-9]+$ ]] || fail "cannot parse the statistics line: $line"
}

serve() {
  start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --cache-mode "$1"
}

# The fio jobs of region BASE (bytes): 4 jobs x 32 MiB, mixed block sizes.
fio_args() {
  echo --name=mixed --rw=randwrite --numjobs=4 --size=32M --offset="$1" --offset_increment=32M \
    --iodepth=16 --bssplit=4k/30:8k/10:16k/10:64k/20:128k/10:512k/10:1m/10 --blockalign=4k \
    --verify=crc32c --verify_fatal=1 --randseed="$2"
}

# qemu-io patterns at BASE+128M .. BASE+144M; PAT_* differ per mode.
qemu_patterns() {
  local mode=$1 q=$(($2 + 128 * M)) p=$3
  local a=$((q)) b=$((q + 4 * M)) z=$((q + 8 * M)) d=$((q + 12 * M))
  # Fill, read (fills the cache in writearound), read again (hits).
  qio "$mode: fill" "write -q -P $p $a 4M" "write -q -P $p $b 4M" "write -q -P $p $z 4M" "write -q -P $p $d 4M" \
    "read -q -P $p $a 16M" "read -q -P $p $a 16M"
  qio_must_fail "$mode: self-check" "read -q -P $((p ^ 0xff)) $a 64k"
  # Overwrite cached data, 4k pieces and a sub-4k piece; the old copy must never be read.
  qio "$mode: overwrite cached" "read -q -P $p $a 1M" "write -q -P $((p + 1)) $((a + 4096)) 8k" \
    "write -q -P $((p + 2)) $((a + 65536)) 512" "write -q -P $((p + 3)) $((a + 512 * 1024)) 256k" \
    "read -q -P $p $a 4k" "read -q -P $((p + 1)) $((a + 4096)) 8k" "read -q -P $p $((a + 12288)) $((65536 - 12288))" \
    "read -q -P $((p + 2)) $((a + 65536)) 512" "read -q -P $p $((a + 65536 + 512)) $((512 * 1024 - 65536 - 512))" \
    "read -q -P $((p + 3)) $((a + 512 * 1024)) 256k" "read -q -P $p $((a + 768 * 1024)) 256k"
  # FUA overwrite of a cached range, read on another connection.
  qio "$mode: FUA overwrite" "read -q -P $p $b 2M" "write -q -f -P $((p + 4)) $((b + M)) 64k"
  qio "$mode: FUA data" "read -q -P $((p + 4)) $((b + M)) 64k" "read -q -P $p $b 1M" \
    "read -q -P $p $((b + M + 65536)) $((M - 65536))"
  # WRITE_ZEROES over cached data (plain and may-unmap), neighbours intact.
  qio "$mode: write_zeroes" "read -q -P $p $z 4M" "write -q -z $((z + M)) 1M" "write -q -z -u $((z + 3 * M)) 4k" \
    "read -q -P 0 $((z + M)) 1M" "read -q -P 0 $((z + 3 * M)) 4k" \
    "read -q -P $p $z 1M" "read -q -P $p $((z + 2 * M)) 1M" "read -q -P $p $((z + 3 * M + 4096)) $((M - 4096))"
  qio "$mode: zeros on a new connection" "read -q -P 0 $((z + M)) 1M" "read -q -P 0 $((z + 3 * M)) 4k"
  # Discard of cached data: neighbours intact; the range can be rewritten and
  # then reads the new data (not what was cached before the discard).
  qio "$mode: discard" "read -q -P $p $d 4M" "discard -q $((d + M)) 1M" \
    "read -q -P $p $d 1M" "read -q -P $p $((d + 2 * M)) 2M" \
    "write -q -P $((p + 5)) $((d + M)) 1M" "read -q -P $((p + 5)) $((d + M)) 1M"
  qio "$mode: flush" "flush"
}

# Everything qemu_patterns left behind, read-only.
qemu_check() {
  local mode=$1 q=$(($2 + 128 * M)) p=$3
  local a=$((q)) b=$((q + 4 * M)) z=$((q + 8 * M)) d=$((q + 12 * M))
  qio "$mode: $4" \
    "read -q -P $p $a 4k" "read -q -P $((p + 1)) $((a + 4096)) 8k" "read -q -P $p $((a + 12288)) $((65536 - 12288))" \
    "read -q -P $((p + 2)) $((a + 65536)) 512" "read -q -P $p $((a + 65536 + 512)) $((512 * 1024 - 65536 - 512))" \
    "read -q -P $((p + 3)) $((a + 512 * 1024)) 256k" "read -q -P $p $((a + 768 * 1024)) $((3 * M + 256 * 1024))" \
    "read -q -P $p $b 1M" "read -q -P $((p + 4)) $((b + M)) 64k" "read -q -P $p $((b + M + 65536)) $((3 * M - 65536))" \
    "read -q -P $p $z 1M" "read -q -P 0 $((z + M)) 1M" "read -q -P $p $((z + 2 * M)) 1M" \
    "read -q -P 0 $((z + 3 * M)) 4k" "read -q -P $p $((z + 3 * M + 4096)) $((M - 4096))" \
    "read -q -P $p $d 1M" "read -q -P $((p + 5)) $((d + M)) 1M" "read -q -P $p $((d + 2 * M)) 2M"
}

modes=(writethrough writearound none)
pats=(0x11 0x41 0x71)
for i in "${!modes[@]}"; do
  mode=${modes[$i]} base=$((i * 256 * M)) pat=${pats[$i]} seed=$((1000 + i))
  serve "$mode"
  # shellcheck disable=SC2046
  run_fio "$mode: randwrite mixed verify" $(fio_args "$base" "$seed") --do_verify=1
  run_fio "$mode: verify-only" $(fio_args "$base" "$seed") --verify_only=1
  qemu_patterns "$mode" "$base" "$pat"
  qemu_check "$mode" "$base" "$pat" "all patterns"
  stop_server
  stats
  case $mode in
    none) ((hits == 0)) || fail "$mode: $hits cache hits in cache mode none" ;;
    *) ((hits > 0)) || fail "$mode: no cache hits at all (verify reads never served from the cache)" ;;
  esac

  # Restart on the same files: warm, the cached copies are read again.
  serve "$mode"
  grep -q "warm start" "$SERVER_LOG" || fail "$mode: the restart after SIGTERM was not warm"
  run_fio "$mode: verify-only after restart" $(fio_args "$base" "$seed") --verify_only=1
  run_fio "$mode: verify-only after restart, again" $(fio_args "$base" "$seed") --verify_only=1
  qemu_check "$mode" "$base" "$pat" "patterns after restart"
  qemu_check "$mode" "$base" "$pat" "patterns after restart, again"
  stop_server
done

# All three regions, once more, through a writethrough cache.
serve writethrough
for i in "${!modes[@]}"; do
  mode=${modes[$i]} base=$((i * 256 * M)) pat=${pats[$i]} seed=$((1000 + i))
  run_fio "$mode region: final verify" $(fio_args "$base" "$seed") --verify_only=1
  qemu_check "$mode region" "$base" "$pat" "final patterns"
done
stop_server
