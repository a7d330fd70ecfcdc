#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 102-ublk-recover — user recovery in a qemu guest: fio with verify runs on
# /dev/ublkb0 (cache + backing disks) while the daemon is killed with
# kill -9; the device stays, its I/O waits; `serve --recover 0` reattaches
# (START/END_USER_RECOVERY, in-flight requests reissued); fio finishes
# without errors and its verification passes. Then the same with ext4
# mounted: a file writer carries on across kill -9 + --recover, the files
# check out, e2fsck -fn is clean. Both in writethrough and in writeback:
# the device and the mounted filesystem carry on without a power cycle, so
# no acknowledged write may revert — in writeback that rests on the soft
# journal commit before each acknowledgement (doc/design.md, "Durability").
# MODES="writeback" (or "writethrough") runs one.
# ctest: cost 1200
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

cat >"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
SERVE="--cache /dev/vda --backing /dev/vdb --cache-mode ${MODE:-writethrough}"
kill9_and_recover() {
  kill -9 "$SRV_PID"; wait "$SRV_PID" 2>/dev/null; SRV_PID=""
  [ -b /dev/ublkb0 ] || fail "/dev/ublkb0 vanished after kill -9"
  sleep 1  # I/O queues up in the driver meanwhile
  start_srv 1 $SERVE --recover 0
  grep -q '/dev/ublkb0: reattached' "$SRV_LOG" || fail "no reattach line"
}

start_srv 1 $SERVE --ublk
# rate_iops bounds the write phase from below (6144 writes at <= 1000/s:
# >= 6 s), so the kill at 3 s always lands in it however fast the host
# is; unthrottled, a fast CI host finished all 24 MiB before the kill.
/usr/bin/fio --name=verify --filename=/dev/ublkb0 --ioengine=libaio --direct=1 --iodepth=16 \
  --rw=randwrite --bs=4k --size=24M --rate_iops=1000 --verify=crc32c --verify_fatal=1 --do_verify=1 \
  --eta=never --output=/tmp/fio.out &
FIO=$!
sleep 3
kill -0 $FIO 2>/dev/null || fail "fio finished before the kill: $(cat /tmp/fio.out)"
kill9_and_recover
wait $FIO; rc=$?
[ $rc -eq 0 ] || fail "fio failed ($rc) across kill -9 + --recover: $(cat /tmp/fio.out)"
grep -q 'err= 0' /tmp/fio.out || fail "fio reported errors: $(cat /tmp/fio.out)"
say "fio verify passed across kill -9 + recover"

/sbin/mke2fs -t ext4 -q -F /dev/ublkb0 || fail "mke2fs failed"
mkdir -p /mnt/u
mount -t ext4 /dev/ublkb0 /mnt/u || fail "mount failed"
mkdir /mnt/u/d
(for i in $(seq 60); do head -c $((i * 5000)) /dev/urandom >/mnt/u/d/f$i; sha256sum /mnt/u/d/f$i >>/tmp/sums; done; sync) &
W=$!
sleep 2
kill9_and_recover
wait $W || fail "the file writer failed across kill -9 + --recover"
sha256sum -c -s /tmp/sums || fail "files differ after recovery"
umount /mnt/u
fsck_clean /dev/ublkb0
! grep -q 'ublk queue' "$SRV_LOG" || fail "request errors in the server log"
stop_srv
[ ! -e /dev/ublkb0 ] || fail "/dev/ublkb0 left behind after SIGTERM"
say OK
GUEST
for mode in ${MODES:-writethrough writeback}; do
  rm -f "$WORK/cache.img" "$WORK/backing.img"
  format_cache_backing 128M 256M  # $WORK/cache.img, $WORK/backing.img: the guest disks
  log "cache mode $mode"
  vm_guest "$WORK/guest.sh" --disk "$WORK/cache.img" --disk "$WORK/backing.img" --env "MODE=$mode" \
    --module ext4 --with /sbin/mke2fs --with /sbin/e2fsck --with /usr/bin/fio --file /etc/mke2fs.conf
done
