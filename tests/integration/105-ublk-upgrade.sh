#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 105-ublk-upgrade — five upgrades in a row under a mounted filesystem, in a
# qemu guest. The daemon runs as ubcache@.service runs it (`serve --config
# FILE --recover auto`, writeback); ext4 is mounted on /dev/ublkb0 and fio
# runs on it, one verifying job after another, the whole time. Each upgrade
# is a stop (SIGTERM as systemctl sends it, or `ubcache stop NAME`), then a
# start of the other binary (a copy of $UBCACHE at another path, standing
# in for the new version). Every stop must exit 0 and leave /dev/ublkb0 in
# place ("left in place with its I/O held"); every start must reattach it,
# replay no journal record (the stop wrote a clean checkpoint), and read a
# file written before the first upgrade from the cache: its hit ratio right
# after the upgrade at least what it was before. At the end: every fio job
# exited 0 with no I/O error and no verify failure, no I/O error in the
# kernel log, e2fsck -fn clean, and `ubcache stop --delete` takes the device
# away. The longest I/O pause is fio's largest completion latency over all
# jobs, printed (emulated guest: a functional figure, not a benchmark).
# ctest: cost 1300
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

cat >"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
CONF=$WORKDIR/vm.conf
CTL=$WORKDIR/ctl.sock
cat >"$CONF" <<CONF
# as /etc/ubcache/NAME.conf would say it
cache /dev/vda
backing /dev/vdb
cache-mode writeback
sequential-cutoff 0
ublk
ublk-id 0
control $CTL
CONF
# The "new version" of each upgrade: the two binaries take turns.
NEXT=/tmp/ubcache.next
cp "$UBCACHE" "$NEXT" || fail "cannot copy the binary"
BIN=$UBCACHE
SRV_LOG=$WORKDIR/srv.log
start() {  # the unit's ExecStart, with binary $BIN; waits for COUNT lines of PATTERN
  "$BIN" serve --config "$CONF" --recover auto 2>>"$SRV_LOG" &
  SRV_PID=$!
  i=0
  # (no log yet, before the shell in the background opened it: 0 lines)
  while n=$(grep -c -e "$2" "$SRV_LOG" 2>/dev/null); [ "${n:-0}" -lt "$1" ]; do
    kill -0 $SRV_PID 2>/dev/null || fail "serve ($BIN) exited before '$2'"
    i=$((i + 1)); [ $i -lt 600 ] || fail "no '$2' after 60 s"
    sleep 0.1
  done
  # The control socket comes up before the device; wait for it anyway.
  i=0; while [ ! -S "$CTL" ]; do i=$((i + 1)); [ $i -lt 100 ] || fail "no $CTL"; sleep 0.1; done
}
# counts: "HITS MISSES" since the daemon started (one ctl call: each loads
# the binary, slow in an emulated guest).
counts() {
  "$BIN" ctl --control "$CTL" stats stats_total >/tmp/stats || fail "ctl stats failed"
  awk '$1 == "stats_total/cache_hits" { h = $2 } $1 == "stats_total/cache_misses" { m = $2 } END { print h, m }' /tmp/stats
}
# fio_signal SIG: to every fio process.
fio_signal() {
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = fio ] && kill -"$1" "${p#/proc/}" 2>/dev/null
  done
  return 0
}
# warm_ratio: per mille of the cache hits while reading /mnt/u/warm with
# O_DIRECT, fio paused meanwhile (its reads and ext4's would blur it).
warm_ratio() {
  fio_signal STOP
  sleep 0.5
  set -- $(counts); h0=$1 m0=$2
  dd if=/mnt/u/warm of=/dev/null bs=64k iflag=direct 2>/dev/null || fail "reading /mnt/u/warm failed"
  set -- $(counts); h1=$1 m1=$2
  fio_signal CONT
  dh=$((h1 - h0)); dm=$((m1 - m0))
  [ $((dh + dm)) -gt 0 ] || fail "reading /mnt/u/warm counted no cache lookup"
  echo $((1000 * dh / (dh + dm)))
}

start 1 '/dev/ublkb0: serving export'
/sbin/mke2fs -t ext4 -q -F /dev/ublkb0 || fail "mke2fs failed"
mkdir -p /mnt/u
mount -t ext4 /dev/ublkb0 /mnt/u || fail "mount failed"
dd if=/dev/urandom of=/mnt/u/warm bs=1M count=8 2>/dev/null && sync || fail "writing /mnt/u/warm failed"
sum=$(sha256sum </mnt/u/warm)

# fio, one verifying job after another until /tmp/fio.stop: each writes 4 MiB
# in random 4k blocks (rate-limited, so a job spans an upgrade) and reads
# every block back against its checksum.
rm -f /tmp/fio.stop /tmp/fio.failed
(
  n=0
  while [ ! -e /tmp/fio.stop ]; do
    n=$((n + 1))
    /usr/bin/fio --name=upgrade$n --filename=/mnt/u/fio.dat --size=4M --rw=randwrite --bs=4k \
      --ioengine=libaio --direct=1 --iodepth=8 --rate_iops=500 --verify=crc32c --verify_fatal=1 \
      --do_verify=1 --output-format=json --output=/tmp/fio.$n.json >/dev/null 2>/tmp/fio.$n.err ||
      { echo "$n" >/tmp/fio.failed; break; }
  done
  echo "$n" >/tmp/fio.runs
) &
FIO=$!
sleep 3

for u in 1 2 3 4 5; do
  kill -0 $FIO 2>/dev/null || fail "fio stopped before upgrade $u: $(cat /tmp/fio.*.err)"
  before=$(warm_ratio)
  old=$SRV_PID
  if [ $((u % 2)) -eq 1 ]; then
    kill -TERM $old  # what systemctl stop/restart sends
  else
    "$BIN" stop --control "$CTL" 2>>"$WORKDIR/stop.log" || fail "ubcache stop failed: $(cat "$WORKDIR/stop.log")"
  fi
  wait $old; rc=$?
  [ $rc -eq 0 ] || fail "upgrade $u: the old daemon exited $rc"
  [ -b /dev/ublkb0 ] || fail "upgrade $u: /dev/ublkb0 went away with the old daemon"
  [ "$(grep -c '/dev/ublkb0: left in place with its I/O held' "$SRV_LOG")" -eq $u ] ||
    fail "upgrade $u: no 'left in place' line"
  if [ "$BIN" = "$UBCACHE" ]; then BIN=$NEXT; else BIN=$UBCACHE; fi
  start $u '/dev/ublkb0: reattached'
  grep 'journal records replayed' "$SRV_LOG" | tail -n 1 | grep -q 'after a clean shutdown, checkpoint [0-9]*: 0 journal records replayed' ||
    fail "upgrade $u: the start replayed the journal: $(grep 'journal records replayed' "$SRV_LOG" | tail -n 1)"
  after=$(warm_ratio)
  say "upgrade $u ($(basename "$BIN")): /dev/ublkb0 kept, nothing replayed, hit ratio reading a file written before: $before per mille before, $after after"
  [ "$after" -ge "$before" ] || fail "upgrade $u: hit ratio fell from $before to $after per mille (a cold cache?)"
  sleep 1
done

touch /tmp/fio.stop
wait $FIO
[ ! -e /tmp/fio.failed ] || fail "fio job $(cat /tmp/fio.failed) failed: $(cat /tmp/fio.$(cat /tmp/fio.failed).err; tail -n 30 /tmp/fio.$(cat /tmp/fio.failed).json)"
runs=$(cat /tmp/fio.runs)
[ "$runs" -ge 2 ] || fail "only $runs fio job ran"
errors=0; pause=0
for f in /tmp/fio.*.json; do
  grep -q '"error" : 0' "$f" || errors=$((errors + 1))
  # Every clat max (reads and writes), in nanoseconds.
  for m in $(awk '/"clat_ns"/ { c = 1 } c && /"max"/ { gsub(/[^0-9]/, ""); print; c = 0 }' "$f"); do
    [ "$m" -gt "$pause" ] && pause=$m
  done
done
[ $errors -eq 0 ] || fail "$errors fio jobs reported errors"
[ "$pause" -gt 0 ] || fail "no completion latency in fio's output"
say "fio: $runs verifying jobs, 0 I/O errors, 0 verify failures; longest I/O pause $((pause / 1000000)) ms (emulated guest)"
! dmesg | grep -qi 'i/o error' || fail "I/O errors in the kernel log: $(dmesg | grep -i 'i/o error' | head -n 3)"
! grep -q 'ublk queue' "$SRV_LOG" || fail "request errors in the server log"
[ "$(sha256sum </mnt/u/warm)" = "$sum" ] || fail "/mnt/u/warm changed"
umount /mnt/u
fsck_clean /dev/ublkb0
"$BIN" stop --delete --control "$CTL" 2>>"$WORKDIR/stop.log" || fail "ubcache stop --delete failed: $(cat "$WORKDIR/stop.log")"
wait $SRV_PID; rc=$?
[ $rc -eq 0 ] || fail "the daemon exited $rc after stop --delete"
[ ! -e /dev/ublkb0 ] || fail "/dev/ublkb0 left behind after ubcache stop --delete"
grep -q 'devices stopped and deleted' "$SRV_LOG" || fail "no 'devices stopped and deleted' line"
say OK
GUEST
format_cache_backing 128M 256M  # $WORK/cache.img, $WORK/backing.img: the guest disks
# Five stops and starts of the daemon under emulation: more than the default.
VM_TIMEOUT=${VM_TIMEOUT:-560} vm_guest "$WORK/guest.sh" --disk "$WORK/cache.img" --disk "$WORK/backing.img" \
  --module ext4 --with /sbin/mke2fs --with /sbin/e2fsck --with /usr/bin/fio --file /etc/mke2fs.conf
grep '^guest: fio:' "$WORK/vm.1.log" >&2
