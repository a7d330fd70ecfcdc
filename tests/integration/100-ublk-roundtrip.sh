#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 100-ublk-roundtrip — `serve --ublk` on a plain backing disk in a qemu guest
# (vm-run): /dev/ublkbN appears, 16 MiB written with O_DIRECT read back
# byte-identical and found on the backing disk itself; both data paths
# (USER_COPY, and the buffer-copy path with USER_COPY hidden); --ublk-id,
# --queues, --depth; two backing devices behind one cache get a device
# each; SIGTERM stops and deletes the devices.
# ctest: cost 1100
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

disk_image "$WORK/backing.img" 64M
cat >"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
# USER_COPY (offered by this kernel), default queues and depth.
start_srv 1 --backing /dev/vda --ublk
grep -q '/dev/ublkb0: serving.*user copy' "$SRV_LOG" || fail "expected /dev/ublkb0 with user copy"
roundtrip /dev/ublkb0 16
dd if=/dev/vda of=/tmp/disk bs=1M count=16 iflag=direct 2>/dev/null
cmp /tmp/rt.in /tmp/disk || fail "the backing disk does not hold what was written"
stop_srv
[ ! -e /dev/ublkb0 ] && [ ! -e /dev/ublkc0 ] || fail "device left behind after SIGTERM"
grep -q 'devices stopped and deleted' "$SRV_LOG" || fail "no clean-stop line"

# The buffer-copy path: USER_COPY hidden; a chosen id, 1 queue, depth 8.
export UBCACHE_UBLK_HIDE_FEATURES=0x80
start_srv 1 --backing /dev/vda --ublk --ublk-id 5 --queues 1 --depth 8
unset UBCACHE_UBLK_HIDE_FEATURES
grep -q '/dev/ublkb5: serving.*1 queue x depth 8, buffer copy' "$SRV_LOG" || fail "expected /dev/ublkb5, buffer copy"
roundtrip /dev/ublkb5 16
stop_srv
[ ! -e /dev/ublkb5 ] || fail "/dev/ublkb5 left behind"

# Two backing devices behind one cache: one ublk device each, ids 2 and 3.
start_srv 2 --cache mem:64M --backing mem:32M --backing mem:48M --ublk --ublk-id 2
[ "$(blockdev --getsize64 /dev/ublkb2)" = 33554432 ] || fail "/dev/ublkb2 has the wrong size"
[ "$(blockdev --getsize64 /dev/ublkb3)" = 50331648 ] || fail "/dev/ublkb3 has the wrong size"
roundtrip /dev/ublkb3 4
cp /tmp/rt.in /tmp/b3
roundtrip /dev/ublkb2 4
cmp -s /tmp/rt.in /tmp/b3 && fail "the two writes were the same data"
dd if=/dev/ublkb3 of=/tmp/b3.out bs=1M count=4 iflag=direct 2>/dev/null
cmp /tmp/b3 /tmp/b3.out || fail "/dev/ublkb3 changed when /dev/ublkb2 was written"
stop_srv
[ ! -e /dev/ublkb2 ] && [ ! -e /dev/ublkb3 ] || fail "devices left behind"
say OK
GUEST
vm_guest "$WORK/guest.sh" --disk "$WORK/backing.img"
