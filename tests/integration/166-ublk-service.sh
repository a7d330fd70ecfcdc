#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 166-ublk-service — what ubcache@.service does after a crash, in a qemu
# guest (busybox: no systemd there, so a shell loop stands in for
# Restart=on-failure, restarting the unit's exact ExecStart,
# `serve --config FILE --recover auto`, whenever it dies of a signal).
# The first start adds /dev/ublkb0 (no device with id 0 exists yet); ext4
# is made and mounted on it; a file writer runs while the daemon is killed
# with kill -9 twice; each restart, with the same command line, reattaches
# the device ("reattached", not a new one); the writer finishes without an
# I/O error, every file checks out, e2fsck -fn is clean. `ubcache stop
# --delete` then stops the loop (exit 0) and deletes the device (a plain
# SIGTERM would hand it over to the next start: 105-ublk-upgrade).
# Writeback, so the crash finds dirty data in the cache.
# ctest: cost 1100
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

cat >"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
CONF=$WORKDIR/vm.conf
cat >"$CONF" <<CONF
# as /etc/ubcache/NAME.conf would say it
cache /dev/vda
backing /dev/vdb
cache-mode writeback
ublk
ublk-id 0
control $WORKDIR/ctl.sock
CONF
SRV_LOG=$WORKDIR/srv.log
# Restart=on-failure, RestartSec=1: exit 0 (a stop) or 2 (a usage error)
# ends it; anything else restarts the same command line.
(
  while :; do
    "$UBCACHE" serve --config "$CONF" --recover auto 2>>"$SRV_LOG" &
    echo $! >"$WORKDIR/srv.pid"
    wait $!; rc=$?
    echo "exit $rc" >>"$WORKDIR/exits"
    [ $rc -eq 0 ] || [ $rc -eq 2 ] && break
    sleep 1
  done
) &
LOOP=$!
wait_line() {  # COUNT PATTERN — waits up to 60 s for COUNT lines
  i=0
  # (no log yet, before the server's first line: grep prints nothing — 0)
  while n=$(grep -c -e "$2" "$SRV_LOG" 2>/dev/null); [ "${n:-0}" -lt "$1" ]; do
    i=$((i + 1)); [ $i -lt 600 ] || fail "no $1 x '$2' in the server log after 60 s"
    kill -0 $LOOP 2>/dev/null || fail "the restart loop ended: $(cat "$WORKDIR/exits")"
    sleep 0.1
  done
}
wait_line 1 '/dev/ublkb0: serving export'
[ -b /dev/ublkb0 ] || fail "no /dev/ublkb0 after the first start"
/sbin/mke2fs -t ext4 -q -F /dev/ublkb0 || fail "mke2fs failed"
mkdir -p /mnt/u
mount -t ext4 /dev/ublkb0 /mnt/u || fail "mount failed"
mkdir /mnt/u/d
(for i in $(seq 90); do head -c $((i * 5000)) /dev/urandom >/mnt/u/d/f$i || exit 1
   sha256sum /mnt/u/d/f$i >>/tmp/sums; sleep 0.1; done; sync) &
W=$!
for k in 1 2; do
  sleep 2
  kill -0 $W 2>/dev/null || fail "the writer finished before kill $k"
  kill -9 "$(cat "$WORKDIR/srv.pid")"
  wait_line $k '/dev/ublkb0: reattached'
  say "kill -9 number $k: the same command line reattached /dev/ublkb0"
done
wait $W || fail "the file writer failed across kill -9 and the restarts"
sha256sum -c -s /tmp/sums || fail "files differ after the restarts"
[ "$(wc -l </tmp/sums)" -eq 90 ] || fail "the writer wrote $(wc -l </tmp/sums) files, not 90"
umount /mnt/u
fsck_clean /dev/ublkb0
[ "$(grep -c '/dev/ublkb0: serving export' "$SRV_LOG")" -eq 1 ] || fail "a restart added a new device instead of reattaching"
! grep -q 'ublk queue' "$SRV_LOG" || fail "request errors in the server log"
"$UBCACHE" stop --delete --control "$WORKDIR/ctl.sock" 2>"$WORKDIR/stop.err" ||
  fail "ubcache stop --delete: $(cat "$WORKDIR/stop.err")"
wait $LOOP
[ "$(cat "$WORKDIR/exits" | tr '\n' ' ')" = "exit 137 exit 137 exit 0 " ] ||
  fail "exit statuses: $(cat "$WORKDIR/exits")"
[ ! -e /dev/ublkb0 ] || fail "/dev/ublkb0 left behind after ubcache stop --delete"
say OK
GUEST
format_cache_backing 128M 256M  # $WORK/cache.img, $WORK/backing.img: the guest disks
vm_guest "$WORK/guest.sh" --disk "$WORK/cache.img" --disk "$WORK/backing.img" \
  --module ext4 --with /sbin/mke2fs --with /sbin/e2fsck --file /etc/mke2fs.conf
