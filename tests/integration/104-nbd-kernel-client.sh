#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 104-nbd-kernel-client — the kernel's own NBD client against our server, in
# a qemu guest: `serve --nbd unix:...` over a formatted cache and backing
# disk, `nbd-client -unix` attaches /dev/nbd0; 16 MiB O_DIRECT round trip;
# mkfs.ext4, mount, files written and checked after a remount, umount,
# e2fsck -fn clean; nbd-client -d detaches; SIGTERM stops the server. Then
# over TLS (--tls require, X.509 with client certificates verified):
# nbd-client -certfile/-keyfile/-cacertfile attaches and round-trips, and
# without a certificate it is refused. Then one server with --nbd and
# --ublk: what /dev/ublkb0 writes, /dev/nbd0 reads.
# ctest: cost 1100
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

NBD_CLIENT=$(command -v nbd-client || true)
[[ -n $NBD_CLIENT ]] || fail "nbd-client is not installed (scripts/install-deps installs it)"
disk_image "$WORK/cache.img" 128M
disk_image "$WORK/backing.img" 256M
"$UBCACHE" format --cache "$WORK/cache.img" --backing "$WORK/backing.img" >"$WORK/format.log" 2>&1 ||
  fail "format failed: $(cat "$WORK/format.log")"

TLS=$WORK/tls
make_tls_ca "$TLS/ca"
make_tls_cert "$TLS/ca" "$TLS/srv" server
make_tls_cert "$TLS/ca" "$TLS/cli" client

cat >"$WORK/guest.sh" <<GUEST
NBD_CLIENT=$NBD_CLIENT
TLS=$TLS
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

# Over TLS: nbd-client does the TLS itself (GnuTLS) and relays between the
# socket it gives the kernel and the TLS session.
SRV_SOCK=/tmp/tls.sock
start_srv 0 --cache /dev/vda --backing /dev/vdb --nbd unix:$SRV_SOCK --tls require \
  --tls-certificates $TLS/srv --tls-verify-peer
$NBD_CLIENT -unix $SRV_SOCK /dev/nbd0 -b 4096 -cacertfile $TLS/cli/ca-cert.pem -certfile $TLS/cli/client-cert.pem \
  -keyfile $TLS/cli/client-key.pem -tlshostname localhost -enable-tls >/tmp/nbdc.log 2>&1 || fail "nbd-client over TLS failed: $(cat /tmp/nbdc.log)"
roundtrip /dev/nbd0 16
$NBD_CLIENT -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d (TLS) failed"
if $NBD_CLIENT -unix $SRV_SOCK /dev/nbd0 -b 4096 -cacertfile $TLS/cli/ca-cert.pem -tlshostname localhost -enable-tls >/tmp/nbdc.log 2>&1; then
  $NBD_CLIENT -d /dev/nbd0 >/dev/null 2>&1
  fail "nbd-client without a client certificate was let in"
fi
stop_srv

# Both frontends on one export: written through /dev/ublkb0, read through
# /dev/nbd0; one SIGTERM stops both and deletes the ublk device.
SRV_SOCK=/tmp/both.sock
start_srv 1 --cache /dev/vda --backing /dev/vdb --nbd unix:$SRV_SOCK --ublk
i=0; while [ ! -S $SRV_SOCK ]; do i=$((i + 1)); [ $i -lt 100 ] || fail "no NBD socket"; sleep 0.1; done
$NBD_CLIENT -unix $SRV_SOCK /dev/nbd0 -b 4096 >/tmp/nbdc.log 2>&1 || fail "nbd-client failed: $(cat /tmp/nbdc.log)"
dd if=/dev/urandom of=/tmp/both.in bs=1M count=8 2>/dev/null
dd if=/tmp/both.in of=/dev/ublkb0 bs=1M seek=32 oflag=direct 2>/dev/null || fail "write to /dev/ublkb0 failed"
dd if=/dev/nbd0 of=/tmp/both.out bs=1M skip=32 count=8 iflag=direct 2>/dev/null || fail "read of /dev/nbd0 failed"
cmp /tmp/both.in /tmp/both.out || fail "/dev/nbd0 does not read what /dev/ublkb0 wrote"
$NBD_CLIENT -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d failed"
stop_srv
[ ! -e /dev/ublkb0 ] || fail "/dev/ublkb0 left behind after SIGTERM"
say OK
GUEST
vm_guest "$WORK/guest.sh" --disk "$WORK/cache.img" --disk "$WORK/backing.img" \
  --module ext4 --with /sbin/mke2fs --with /sbin/e2fsck --with "$NBD_CLIENT" --file /etc/mke2fs.conf \
  --file "$TLS"
