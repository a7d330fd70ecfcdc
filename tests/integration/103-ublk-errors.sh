#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 103-ublk-errors — every bad case of `serve --ublk` gives one line on
# stderr and exit 2, in a qemu guest: device id taken (and --recover of a
# device a live server holds); --recover of a device that does not exist;
# a kernel lacking a feature we need (simulated: UBCACHE_UBLK_HIDE_FEATURES
# hides bits GET_FEATURES reports, since this kernel has them all); not root
# (su to uid 1000); ublk_drv not loaded (rmmod). Also: one SIGTERM
# stops and deletes the device; a second SIGTERM while the stop waits on
# slow requests makes the server exit at once; the stopped device it leaves
# is taken over by --recover (deleted and added anew) and stopped cleanly.
# ctest: cost 1100
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/vm_lib.sh"

cat >"$WORK/guest.sh" <<'GUEST'
. "$GUEST_LIB"
# expect_err WHAT NEEDLE ARGS... — serve ARGS must exit 2 with one error
# line ("ubcache: ...", besides the info log) holding NEEDLE.
expect_err() {
  what=$1 needle=$2; shift 2
  expect_exit 2 "$UBCACHE" serve "$@"
  n=$(grep -c '^ubcache: ' "$WORKDIR/err")
  [ "$n" -eq 1 ] || fail "$what: expected one error line, got $n: $(cat "$WORKDIR/err")"
  grep '^ubcache: ' "$WORKDIR/err" | grep -qF -- "$needle" ||
    fail "$what: expected '$needle' in: $(cat "$WORKDIR/err")"
  say "$what: $(grep '^ubcache: ' "$WORKDIR/err")"
}

start_srv 1 --backing mem:64M --ublk --ublk-id 0
expect_err "id taken" "device id 0 is taken" --backing mem:64M --ublk --ublk-id 0
expect_err "recover a live device" "is served by process" --backing mem:64M --recover 0
stop_srv
[ ! -e /dev/ublkb0 ] || fail "/dev/ublkb0 left behind after SIGTERM"
expect_err "recover a missing device" "there is no ublk device 7" --backing mem:64M --recover 7

export UBCACHE_UBLK_HIDE_FEATURES=0x40
expect_err "missing feature" "lacks cmd_ioctl_encode" --backing mem:64M --ublk
export UBCACHE_UBLK_HIDE_FEATURES=0x8
expect_err "missing recovery" "lacks user_recovery" --backing mem:64M --recover 0
unset UBCACHE_UBLK_HIDE_FEATURES

# Not root: busybox su to a user added for the purpose (uid 1000).
echo 'tester:x:1000:1000::/tmp:/bin/sh' >>/etc/passwd
echo 'tester:x:1000:' >>/etc/group
expect_exit 2 su -s /bin/sh tester -c "$UBCACHE serve --backing mem:64M --ublk"
grep -q '^ubcache: .*needs root' "$WORKDIR/err" || fail "not root: $(cat "$WORKDIR/err")"
say "not root: $(grep '^ubcache: ' "$WORKDIR/err")"

# A second SIGTERM while the stop waits on slow requests: exit at once.
start_srv 1 --backing fault,latency_us=4000000:mem:64M --ublk --ublk-id 0
dd if=/dev/zero of=/dev/ublkb0 bs=4k count=64 oflag=direct 2>/dev/null &
DD=$!
sleep 1
kill -TERM "$SRV_PID"; sleep 0.5; kill -TERM "$SRV_PID"
i=0
while kill -0 "$SRV_PID" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 50 ] || fail "server still running 5 s after the second SIGTERM"
  sleep 0.1
done
wait "$SRV_PID"; say "second SIGTERM: server exited ($?) within $((i / 10)).$((i % 10)) s"
SRV_PID=""
grep -q 'giving up waiting' "$SRV_LOG" || fail "no note of the second signal"
# What it left behind is taken over by --recover, then stopped cleanly.
[ -e /dev/ublkc0 ] || fail "expected the abandoned device to stay for --recover"
start_srv 1 --backing mem:64M --recover 0
grep -q 'deleting it and adding it anew' "$SRV_LOG" || fail "expected the stopped device to be re-added"
stop_srv
[ ! -e /dev/ublkb0 ] || fail "/dev/ublkb0 left behind after SIGTERM"
wait $DD 2>/dev/null

# Last: the driver unloaded.
rmmod ublk_drv || fail "rmmod ublk_drv failed"
expect_err "driver not loaded" "modprobe ublk_drv" --backing mem:64M --ublk
say OK
GUEST
vm_guest "$WORK/guest.sh"
