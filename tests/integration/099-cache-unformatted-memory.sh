#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 099-cache-unformatted-memory — an unformatted cache (`serve --cache FILE
# --backing FILE`, no `format`: the index lives in RAM for one run) keeps its
# memory bounded under sustained writes. Issue 29 item 4: its index kept
# every change as a pending journal op nothing committed, so RSS grew with
# every write (78 -> 198 -> 329 MB at 20, 60 and 100 s of fio).
# fio (nbd engine) first writes each 4 KiB block of a 256 MiB range once,
# so the index holds its final 64 Ki extents; then 60 s of 4 KiB random
# writes over the same range, the daemon's VmRSS and answered writes sampled
# every 5 s. Over the second half the index does not grow, so neither may
# RSS: at most 1 MiB, or 8 bytes per write (the leak was ~50 per write).
# ctest: cost 90
source "$(dirname "$0")/lib.sh"

CACHE=$WORK/cache.img BACKING=$WORK/backing.img
truncate -s 1G "$CACHE"
truncate -s 512M "$BACKING"
start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --control "$CTL_SOCK" \
  --sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0
pid=$SERVER_PID
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }
writes() { ctl get requests/write || fail "ctl get requests/write"; }

fio_run() {
  (cd "$WORK" && timeout 300 fio --name="$1" --ioengine=nbd --uri="$(nbd_uri)" --rw=randwrite --bs=4k \
    --size=256M --iodepth=32 --randrepeat=0 --output-format=terse "${@:2}" >"$WORK/fio.$1.out" \
    2>"$WORK/fio.$1.err") || fail "fio $1: $(tail -5 "$WORK/fio.$1.err")"
}
log "each 4 KiB block of 256 MiB once"
fio_run fill
extents=$(ctl get internal/btree_extents) || fail "ctl get internal/btree_extents"
((extents >= 65536)) || fail "after writing 64 Ki blocks the index holds $extents extents"

log "60 s of 4 KiB random writes, RSS sampled every 5 s"
# fio runs a little longer than the samples span, so every one is taken
# under writes.
fio_run sustained --time_based --runtime=66 &
fio_pid=$!
on_exit "kill $fio_pid"
now_ms() { echo $(($(date +%s%N) / 1000000)); }
rss=() wr=() t=()
t0=$(now_ms)
for i in $(seq 0 12); do
  wait_ms=$((t0 + i * 5000 - $(now_ms)))
  ((wait_ms <= 0)) || sleep "$((wait_ms / 1000)).$(printf '%03d' $((wait_ms % 1000)))"
  kill -0 "$fio_pid" 2>/dev/null || fail "fio ended before the sample at $((i * 5)) s: $(cat "$WORK/fio.sustained.err")"
  rss+=("$(rss_kib)") wr+=("$(writes)") t+=("$((i * 5))")
done
wait "$fio_pid" || fail "fio sustained: $(tail -5 "$WORK/fio.sustained.err")"
server_alive "after the writes"
samples=""
for i in "${!t[@]}"; do samples+="${t[$i]}s ${rss[$i]} KiB ($((wr[$i] - wr[0])) writes); "; done
log "VmRSS: $samples"
extents_end=$(ctl get internal/btree_extents) || fail "ctl get internal/btree_extents"

# Second half: samples 6 (30 s) to 12 (60 s).
growth=$(((rss[12] - rss[6]) * 1024)) half_writes=$((wr[12] - wr[6]))
((half_writes >= 10000)) || fail "only $half_writes writes in the second 30 s: too few to measure a leak"
log "second half: $half_writes writes, RSS $((growth / 1024)) KiB, $((growth / half_writes)) B per write;" \
  "index $extents -> $extents_end extents"
((growth <= 1048576 || growth <= 8 * half_writes)) ||
  fail "RSS grew $((growth / 1024)) KiB over $half_writes writes ($((growth / half_writes)) B per write) while the index stayed at $extents_end extents"
stop_server
log "ok"
