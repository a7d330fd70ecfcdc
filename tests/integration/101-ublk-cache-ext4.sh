#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 101-ublk-cache-ext4 — /dev/ublkb0 over a formatted cache and backing disk
# (vm-run --disk images formatted on the host), in a qemu guest: 16 MiB
# O_DIRECT round trip; DISCARD and WRITE_ZEROES ranges read back as zeros
# (blkdiscard, blkdiscard -z); mkfs.ext4 (which discards and zeroes),
# mount, files written, sync (FLUSH/FUA through the ext4 journal), umount,
# e2fsck -fn clean; then the daemon is restarted on the same disks and the
# files are read and checked twice (page cache dropped between): `ctl get
# stats_total/cache_hits` on the live daemon and the statistics line logged
# at SIGTERM show cache hits, and e2fsck stays
# clean. (A formatted cache keeps its index over a clean restart — test 095
# checks that; here the hits are asserted after both reads.)
# ctest: cost 1100
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

format_cache_backing 128M 256M  # $WORK/cache.img, $WORK/backing.img: the guest disks

cat >"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
SERVE="--cache /dev/vda --backing /dev/vdb --ublk --sequential-cutoff 0 --control /tmp/ctl.sock"
no_request_errors() {
  ! grep -q 'ublk queue' "$SRV_LOG" || fail "request errors in the server log: $(grep 'ublk queue' "$SRV_LOG" | head -5)"
}
hits() {
  line=$(grep "export 'ubcache': cache_hits" "$SRV_LOG" | tail -n 1)
  [ -n "$line" ] || fail "no statistics line in $SRV_LOG"
  say "stats: ${line#*export }" >&2
  echo "$line" | sed -E 's/.*cache_hits ([0-9]+) .*/\1/'
}
zeros_at() {  # zeros_at OFFSET_MIB MIB
  dd if=/dev/ublkb0 of=/tmp/z bs=1M skip="$1" count="$2" iflag=direct 2>/dev/null
  head -c $(($2 * 1048576)) /dev/zero | cmp - /tmp/z || fail "$2 MiB at $1 MiB do not read back as zeros"
}

start_srv 1 $SERVE
roundtrip /dev/ublkb0 16
# WRITE_ZEROES and DISCARD over data that is in the cache.
/usr/sbin/blkdiscard -z -o $((4 << 20)) -l $((4 << 20)) /dev/ublkb0 || fail "blkdiscard -z (write zeroes) failed"
zeros_at 4 4
cmp -n $((4 << 20)) /tmp/rt.in /dev/ublkb0 || fail "data before the zeroed range changed"
/usr/sbin/blkdiscard -o $((8 << 20)) -l $((2 << 20)) /dev/ublkb0 || fail "blkdiscard (discard) failed"
zeros_at 8 2

/sbin/mke2fs -t ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/ublkb0 || fail "mke2fs -t ext4 failed"
mkdir -p /mnt/u
mount -t ext4 /dev/ublkb0 /mnt/u || fail "mount failed"
mkdir /mnt/u/data
for i in 1 2 3 4 5 6 7 8; do head -c $((i * 150000)) /dev/urandom >/mnt/u/data/f$i; done
for i in $(seq 100); do head -c $((i * 97)) /dev/urandom >/mnt/u/data/s$i; done
(cd /mnt/u/data && sha256sum * >/tmp/sums)
sync
rm /mnt/u/data/s1*
(cd /mnt/u/data && sha256sum * >/tmp/sums)
umount /mnt/u
fsck_clean /dev/ublkb0
no_request_errors
stop_srv

# Restart on the same cache: the files come back (from the cache).
start_srv 1 $SERVE
fsck_clean /dev/ublkb0
for pass in 1 2; do
  mount -t ext4 -o ro /dev/ublkb0 /mnt/u || fail "mount after restart failed"
  (cd /mnt/u/data && sha256sum -c -s /tmp/sums) || fail "files differ after the restart (read $pass)"
  umount /mnt/u
  echo 3 >/proc/sys/vm/drop_caches
done
live=$("$UBCACHE" ctl --control /tmp/ctl.sock get stats_total/cache_hits) || fail "ctl get failed"
say "ctl: stats_total/cache_hits $live"
[ "$live" -gt 0 ] || fail "ctl shows no cache hits after re-reading the filesystem"
no_request_errors
stop_srv
h=$(hits)
[ "$h" -gt 0 ] || fail "no cache hits re-reading the filesystem after the restart"
say OK
GUEST
vm_guest "$WORK/guest.sh" --disk "$WORK/cache.img" --disk "$WORK/backing.img" \
  --module ext4 --with /sbin/mke2fs --with /sbin/e2fsck --with /usr/sbin/blkdiscard --file /etc/mke2fs.conf
