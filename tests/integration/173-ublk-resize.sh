#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 173-ublk-resize — `ctl resize` of an export served as /dev/ublkb0, in a
# qemu guest (vm-run), asserted by what the guest kernel advertises
# (GET_FEATURES, as the daemon logs it):
#  - with UBLK_F_UPDATE_SIZE (bit 10, Linux 6.16): ctl exits 0 and the block
#    device has the new size at once; a write past the old end reads back
#    and is in the backing file;
#  - without it (6.12, the guest's kernel today): ctl exits 1 with one line
#    naming UBLK_F_UPDATE_SIZE, the block device keeps its size; after kill -9
#    `--recover 0` reattaches the device although it is now smaller than its
#    export (it used to be refused), and it serves; a stop that deletes the
#    device and a new start give it the new size, and a write past the old
#    end reads back and is in the backing file.
# ctest: cost 1100
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

cat >"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
M=1048576
B=/tmp/backing.img
truncate -s 32M $B
serve() { start_srv 1 --cache mem:64M --backing $B --control /tmp/ctl.sock "$@"; }
size() { blockdev --getsize64 /dev/ublkb0; }
# past_old_end: 4 MiB at 40 MiB through /dev/ublkb0, read back, and in $B.
past_old_end() {
  dd if=/dev/urandom of=/tmp/p.in bs=1M count=4 2>/dev/null
  dd if=/tmp/p.in of=/dev/ublkb0 bs=1M seek=40 oflag=direct 2>/dev/null || fail "a write past the old end failed"
  dd if=/dev/ublkb0 of=/tmp/p.out bs=1M skip=40 count=4 iflag=direct 2>/dev/null || fail "a read past the old end failed"
  cmp /tmp/p.in /tmp/p.out || fail "past the old end: read back differs"
  sync
  dd if=$B of=/tmp/p.file bs=1M skip=40 count=4 2>/dev/null
  cmp /tmp/p.in /tmp/p.file || fail "past the old end: the backing file differs"
}

serve --ublk --ublk-id 0
features=$(sed -n 's/.*ublk: driver features \(0x[0-9a-f]*\) .*/\1/p' "$SRV_LOG")
[ -n "$features" ] || fail "the daemon did not log the driver's features"
say "kernel $(uname -r), ublk features $features"
[ "$(size)" = $((32 * M)) ] || fail "/dev/ublkb0: $(size) bytes before the resize"
truncate -s 64M $B
"$UBCACHE" ctl --control /tmp/ctl.sock resize >/tmp/resize.out 2>/tmp/resize.err; rc=$?
if [ $((features & 0x400)) -ne 0 ]; then
  say "UBLK_F_UPDATE_SIZE offered: the device must grow"
  [ $rc -eq 0 ] || fail "ctl resize exited $rc: $(cat /tmp/resize.err)"
  grep -q "grown from 32 MiB to 64 MiB" /tmp/resize.out || fail "ctl resize said: $(cat /tmp/resize.out)"
  [ "$(size)" = $((64 * M)) ] || fail "/dev/ublkb0: $(size) bytes after ctl resize, want $((64 * M))"
  past_old_end
  stop_srv
else
  say "UBLK_F_UPDATE_SIZE not offered: a clear refusal"
  [ $rc -eq 1 ] || fail "ctl resize exited $rc, want 1: $(cat /tmp/resize.out /tmp/resize.err)"
  [ "$(grep -c . /tmp/resize.err)" -eq 1 ] || fail "more than one line: $(cat /tmp/resize.err)"
  grep -q "lacks UBLK_F_UPDATE_SIZE" /tmp/resize.err || fail "the refusal does not name the feature: $(cat /tmp/resize.err)"
  grep -q "grown from 32 MiB to 64 MiB" /tmp/resize.err || fail "the refusal does not say the export grew: $(cat /tmp/resize.err)"
  [ "$(size)" = $((32 * M)) ] || fail "/dev/ublkb0 changed size without UPDATE_SIZE: $(size)"
  roundtrip /dev/ublkb0 4
  # kill -9: the device (32 MiB) stays; its export is 64 MiB now.
  kill -9 "$SRV_PID"; wait "$SRV_PID"; SRV_PID=""
  serve --recover 0
  grep -q "reattached" "$SRV_LOG" || fail "not reattached"
  [ "$(size)" = $((32 * M)) ] || fail "/dev/ublkb0 after --recover: $(size)"
  dd if=/dev/ublkb0 of=/tmp/rt.again bs=1M count=4 iflag=direct 2>/dev/null || fail "read after --recover failed"
  cmp /tmp/rt.in /tmp/rt.again || fail "data changed across --recover"
  stop_srv
  [ ! -e /dev/ublkb0 ] || fail "/dev/ublkb0 left behind after SIGTERM"
  serve --ublk --ublk-id 0
  [ "$(size)" = $((64 * M)) ] || fail "/dev/ublkb0 added again: $(size) bytes, want $((64 * M))"
  past_old_end
  stop_srv
fi
say OK
GUEST
vm_guest "$WORK/guest.sh"
