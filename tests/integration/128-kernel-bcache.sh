#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 128-kernel-bcache — the backing superblock's compatibility claim, proven
# against the real thing: Linux's bcache.ko in a qemu guest.
#
#  1. Ours → the kernel's: `ubcache format --cache C --backing B`, serve in
#     writeback, 16 MiB of random data written through NBD (dirty in the
#     cache), `ctl detach` (writes it back, marks B detached), SIGTERM. In
#     the guest, B registered with /sys/fs/bcache/register appears as
#     /dev/bcacheN and reads back byte-identical.
#  2. The kernel's → ours: in the guest, `make-bcache -B` (bcache-tools) on
#     a second disk, registered, 16 MiB of random data written through
#     /dev/bcacheN, the device stopped. On the host, `ubcache serve --backing`
#     of that disk (no cache) serves the same bytes (nbdcopy, sha256).
# ctest: cost 1100
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

MAKE_BCACHE=$(command -v make-bcache || true)
[[ -n $MAKE_BCACHE ]] || fail "make-bcache is not installed (scripts/install-deps installs bcache-tools)"

# 1. Ours, written through ubcache.
disk_image "$WORK/ours.img" 64M
disk_image "$WORK/cache.img" 64M
disk_image "$WORK/theirs.img" 64M
"$UBCACHE" format --cache "$WORK/cache.img" --backing "$WORK/ours.img" >"$WORK/format.log" 2>&1 ||
  fail "format failed: $(cat "$WORK/format.log")"
random_file "$WORK/ours.data" 16
start_server --cache "$WORK/cache.img" --backing "$WORK/ours.img" --cache-mode writeback \
  --nbd "unix:$SOCK" --control "$CTL_SOCK"
nbdcopy "$WORK/ours.data" "$(nbd_uri)" || fail "nbdcopy into the export failed"
dirty=$(ctl get dirty_data)
log "written through ubcache in writeback: dirty_data $dirty"
ctl detach >"$WORK/detach.log" 2>&1 || fail "ctl detach failed: $(cat "$WORK/detach.log")"
stop_server
state=$(bcache-super-show "$WORK/ours.img" | awk '$1 == "dev.data.cache_state" { print $2 }')
log "after detach, bcache-super-show: dev.data.cache_state $state"
ours_sum=$(sha256sum <"$WORK/ours.data" | cut -d' ' -f1)

cat >"$WORK/guest.sh" <<GUEST
OURS_SUM=$ours_sum
MAKE_BCACHE=$MAKE_BCACHE
GUEST
cat >>"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
# bcacheN of backing disk $1, registered; forced to run if it waits for a cache.
bcache_of() {
  echo "/dev/$1" >/sys/fs/bcache/register 2>/tmp/reg.err || fail "register /dev/$1: $(cat /tmp/reg.err)"
  i=0
  while [ ! -e /sys/block/$1/bcache/dev ]; do
    i=$((i + 1)); [ $i -lt 50 ] || fail "/dev/$1: no bcache device after register"; sleep 0.1
  done
  if [ "$(cat /sys/block/$1/bcache/running)" != 1 ]; then
    say "/dev/$1 waits for its cache set; running it without ($(cat /sys/block/$1/bcache/state))"
    echo 1 >/sys/block/$1/bcache/running
  fi
  basename "$(readlink /sys/block/$1/bcache/dev)"
}

# 1. The kernel reads what ubcache's clients wrote.
b=$(bcache_of vda)
say "ours: /dev/$b, state $(cat /sys/block/vda/bcache/state), $(blockdev --getsize64 /dev/$b) bytes"
[ "$(blockdev --getsize64 /dev/$b)" = $((64 * 1048576 - 8192)) ] || fail "/dev/$b: wrong size"
sum=$(dd if=/dev/$b bs=1M count=16 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
[ "$sum" = "$OURS_SUM" ] || fail "/dev/$b reads $sum, ubcache's clients wrote $OURS_SUM"
say "ours: /dev/$b reads back what was written through ubcache"
echo 1 >/sys/block/$b/bcache/stop

# 2. A device make-bcache made, written by the kernel.
$MAKE_BCACHE -B /dev/vdb >/tmp/mk.log 2>&1 || fail "make-bcache -B failed: $(cat /tmp/mk.log)"
b=$(bcache_of vdb)
dd if=/dev/urandom of=/tmp/theirs bs=1M count=16 2>/dev/null
dd if=/tmp/theirs of=/dev/$b bs=1M oflag=direct conv=fsync 2>/dev/null || fail "write to /dev/$b failed"
say "theirs sha256 $(sha256sum </tmp/theirs | cut -d' ' -f1)"
echo 1 >/sys/block/$b/bcache/stop
sync
say OK
GUEST
vm_guest "$WORK/guest.sh" --disk "$WORK/ours.img" --disk "$WORK/theirs.img" --module bcache \
  --with "$MAKE_BCACHE"

# 2, on the host: ubcache serves the kernel's device with the same bytes.
want=$(awk '$1 == "guest:" && $2 == "theirs" && $3 == "sha256" { print $4 }' "$WORK/vm.1.log")
[[ -n $want ]] || fail "the guest printed no checksum for the device it wrote"
bcache-super-show "$WORK/theirs.img" >"$WORK/theirs.super" 2>&1 || fail "bcache-super-show: $(cat "$WORK/theirs.super")"
start_server --backing "$WORK/theirs.img" --nbd "unix:$SOCK"
nbdcopy "$(nbd_uri)" "$WORK/theirs.out" || fail "nbdcopy out of the export failed"
stop_server
got=$(head -c 16M "$WORK/theirs.out" | sha256sum | cut -d' ' -f1)
[[ $got == "$want" ]] || fail "ubcache serves $got from the make-bcache device; the kernel wrote $want"
log "theirs: ubcache serves what the kernel wrote through /dev/bcacheN ($(grep -E 'dev.data.first_sector|dev.data.cache_state' "$WORK/theirs.super" | tr -s ' ' | tr '\n' ' '))"
