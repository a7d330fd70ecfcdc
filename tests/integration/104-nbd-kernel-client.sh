#!/usr/bin/env bash
# 104-nbd-kernel-client — the kernel's own NBD client against our server, in
# a qemu guest: `serve --nbd unix:...` over a formatted cache and backing
# disk, `nbd-client -unix` attaches /dev/nbd0; 16 MiB O_DIRECT round trip;
# mkfs.ext4, mount, files written and checked after a remount, umount,
# e2fsck -fn clean; nbd-client -d detaches; SIGTERM stops the server.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

NBD_CLIENT=$(command -v nbd-client || true)
[[ -n $NBD_CLIENT ]] || fail "nbd-client is not installed (scripts/install-deps installs it)"
disk_image "$WORK/cache.img" 128M
disk_image "$WORK/backing.img" 256M
"$UBCACHE" format --cache "$WORK/cache.img" --backing "$WORK/backing.img" >"$WORK/format.log" 2>&1 ||
  fail "format failed: $(cat "$WORK/format.log")"

cat >"$WORK/guest.sh" <<GUEST
NBD_CLIENT=$NBD_CLIENT
GUEST
cat >>"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
SRV_SOCK=/tmp/nbd.sock
start_srv 0 --cache /dev/vda --backing /dev/vdb --nbd unix:$SRV_SOCK
$NBD_CLIENT -unix $SRV_SOCK /dev/nbd0 -b 4096 >/tmp/nbdc.log 2>&1 || fail "nbd-client failed: $(cat /tmp/nbdc.log)"
[ "$(blockdev --getsize64 /dev/nbd0)" = 268427264 ] || fail "/dev/nbd0 has $(blockdev --getsize64 /dev/nbd0) bytes"
roundtrip /dev/nbd0 16
/sbin/mke2fs -t ext4 -q -F /dev/nbd0 || fail "mke2fs failed"
mkdir -p /mnt/n
mount -t ext4 /dev/nbd0 /mnt/n || fail "mount failed"
mkdir /mnt/n/data
for i in $(seq 40); do head -c $((i * 20000)) /dev/urandom >/mnt/n/data/f$i; done
(cd /mnt/n/data && sha256sum * >/tmp/sums)
umount /mnt/n
fsck_clean /dev/nbd0
mount -t ext4 -o ro /dev/nbd0 /mnt/n || fail "remount failed"
(cd /mnt/n/data && sha256sum -c -s /tmp/sums) || fail "files differ after remount"
umount /mnt/n
$NBD_CLIENT -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d failed"
stop_srv
say OK
GUEST
vm_guest "$WORK/guest.sh" --disk "$WORK/cache.img" --disk "$WORK/backing.img" \
  --module ext4 --with /sbin/mke2fs --with /sbin/e2fsck --with "$NBD_CLIENT" --file /etc/mke2fs.conf
