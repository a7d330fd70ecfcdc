#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 127-corrupt-metadata — a cache device whose metadata holds random bytes
# (a bad sector, a stray dd, a hostile image) never crashes `serve` and
# never makes it serve stale data: it starts cold, or refuses with one
# clear error line and exit status 2.
#
# Setup: a formatted cache and backing device; pattern A written over 32 MiB
# (cached: sequential_cutoff 0), then pattern B over the same range, so A's
# blocks are still on the cache device where an index read wrongly would
# find them; clean shutdown. Control: the intact image starts warm and reads
# back B with hits. Then, each on a fresh copy of that image, random bytes
# over: the whole journal area (bucket table and journal), every index root
# node, the superblock's index root record, the superblock itself, and 64
# random 4 KiB blocks of each metadata region at once. After each: serve
# either exits 2 with one error line (no sanitizer report, no signal), or
# serves B everywhere (qemu-io pattern check) and stops cleanly.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

format_cache_backing 256M 128M
SERVE=(--cache-mode writethrough --sequential-cutoff 0 --nbd "unix:$SOCK"
       --control "$WORK/ctl.sock")

start_server --cache "$CACHE" --backing "$BACKING" "${SERVE[@]}"
# In 256 KiB requests: one 32 MiB request would be a single extent.
chunks() { local i; for ((i = 0; i < 128; i++)); do echo "$1 -P $2 $((i * 262144)) 256k"; done; }
mapfile -t write_a < <(chunks write 0xa1)
mapfile -t write_b < <(chunks write 0xb2)
mapfile -t read_b < <(chunks read 0xb2)
qio "write A" "${write_a[@]}"
qio "write B" "${write_b[@]}"
stop_server
cp --sparse=always "$CACHE" "$WORK/pristine.img"

# show-super FIELD of an image
field() { "$UBCACHE" show-super "$1" | awk -v k="$2" '$1 == k { $1 = ""; sub(/^ /, ""); print }'; }
bucket=$(field "$WORK/pristine.img" bucket_size)
first=$(field "$WORK/pristine.img" first_bucket)
jbuckets=$(field "$WORK/pristine.img" journal_buckets)
roots=$(field "$WORK/pristine.img" index_root_nodes)
[[ -n $roots ]] || fail "show-super names no index root nodes: the cache is not warm"
log "journal area: buckets $first..$((first + jbuckets - 1)) of $bucket bytes; root nodes at: $roots"

# scribble IMG OFFSET LEN — random bytes over [OFFSET, OFFSET+LEN) of IMG.
scribble() {
  python3 - "$@" <<'EOF'
import os, sys
path, off, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "r+b") as f:
    f.seek(off)
    f.write(os.urandom(length))
EOF
}
# sprinkle IMG START LEN — 64 random 4 KiB blocks of [START, START+LEN).
sprinkle() {
  local i
  for i in $(seq 64); do
    scribble "$1" $(( $2 + (RANDOM * 32768 + RANDOM) % ($3 / 4096) * 4096 )) 4096
  done
}

# try CASE — start serve on $CACHE; judge what it does.
try() {
  local name=$1 log=$WORK/serve.$1.log rc=0
  rm -f "$SOCK"
  "$UBCACHE" serve --cache "$CACHE" --backing "$BACKING" "${SERVE[@]}" 2>"$log" &
  local pid=$! deadline=$((SECONDS + 30))
  while [[ ! -S $SOCK ]] && kill -0 "$pid" 2>/dev/null; do
    ((SECONDS < deadline)) || { kill -KILL "$pid"; fail "$name: serve neither started nor exited in 30 s"; }
    sleep 0.05
  done
  if [[ ! -S $SOCK ]]; then
    wait "$pid" || rc=$?
    grep -qE 'AddressSanitizer|runtime error|Assertion' "$log" && fail "$name: sanitizer or assertion: $(cat "$log")"
    [[ $rc -eq 2 ]] || fail "$name: serve exited $rc (expected 2, or to start): $(tail -n 5 "$log")"
    # One error, the last line, naming the cache device.
    [[ $(grep -c '^ubcache: ' "$log") -eq 1 && $(tail -n 1 "$log") == "ubcache: "*"$CACHE"* ]] ||
      fail "$name: expected one 'ubcache: $CACHE: ...' line, last: $(cat "$log")"
    log "$name: refused (exit 2): $(tail -n 1 "$log")"
    return
  fi
  SERVER_PID=$pid SERVER_LOG=$log
  qio "$name: read back B" "${read_b[@]}"
  local hits
  hits=$(CTL_SOCK=$WORK/ctl.sock ctl stats | awk '$1 == "stats_total/cache_hits" { print $2 }')
  stop_server
  log "$name: started (${hits:-?} cache hits on the read-back), every block is B"
  TRY_HITS=${hits:-0}
}

# Control: the intact image is warm, so metadata decided what was read.
cp --sparse=always "$WORK/pristine.img" "$CACHE"
TRY_HITS=0
try intact
((TRY_HITS > 0)) || fail "intact: the read-back had no cache hits; the test would prove nothing"

corrupt() {
  local name=$1; shift
  cp --sparse=always "$WORK/pristine.img" "$CACHE"
  "$@"
  try "$name"
}
journal_off=$((first * bucket)) journal_len=$((jbuckets * bucket))
corrupt journal-area scribble "$CACHE" "$journal_off" "$journal_len"
corrupt journal-blocks sprinkle "$CACHE" "$journal_off" "$journal_len"
all_roots() { local r; for r in $roots; do scribble "$CACHE" "$r" 65536; done; }
corrupt root-nodes all_roots
some_roots() { local r; for r in $roots; do scribble "$CACHE" $((r + 4096 * (RANDOM % 16))) 4096; done; }
corrupt root-node-blocks some_roots
corrupt root-record scribble "$CACHE" $((4096 + 512)) 3584
corrupt superblock scribble "$CACHE" 4096 4096
everything() { sprinkle "$CACHE" "$journal_off" "$journal_len"; some_roots; scribble "$CACHE" $((4096 + 600)) 64; }
corrupt everything everything
