# SPDX-License-Identifier: Apache-2.0
# guest_lib.sh — sourced by guest scripts (busybox sh) that vm_lib.sh's
# vm_guest runs inside the qemu guest. $UBCACHE is the binary under test.
#
#   fail MSG              print MSG, the server log tail and dmesg tail; exit 1
#   say MSG               progress line
#   start_srv ARGS...     `ubcache serve ARGS` in the background (log $SRV_LOG);
#                         waits until every ublk device it serves is up
#                         ("serving export"/"reattached" lines) or the NBD socket
#                         given as $SRV_SOCK exists; fails if it dies first
#   stop_srv [SIG]        SIGTERM (or SIG); expects exit 0 within 30 s
#   expect_exit RC CMD... CMD must exit RC; its stderr goes to $WORKDIR/err
#   roundtrip DEV MIB     O_DIRECT write of MIB MiB of random data, read back, compare
#   fsck_clean DEV        e2fsck -fn DEV reports no problem
set -u
WORKDIR=$(pwd)
SRV_PID=""
SRV_LOG=""
SRV_N=0
SRV_SOCK=""

say() { echo "guest: $*"; }
fail() {
  echo "GUEST FAIL: $*"
  if [ -n "$SRV_LOG" ] && [ -f "$SRV_LOG" ]; then
    echo "---- server log $SRV_LOG ----"; tail -n 40 "$SRV_LOG"
  fi
  echo "---- dmesg tail ----"; dmesg | tail -n 20
  exit 1
}

# start_srv NDEV ARGS... — NDEV ublk devices to wait for (0 with --nbd).
start_srv() {
  ndev=$1; shift
  SRV_N=$((SRV_N + 1))
  SRV_LOG=$WORKDIR/srv.$SRV_N.log
  say "ubcache serve $*"
  "$UBCACHE" serve "$@" 2>"$SRV_LOG" &
  SRV_PID=$!
  i=0
  while :; do
    if [ "$ndev" -gt 0 ]; then
      up=$(grep -c -e 'serving export' -e 'reattached' "$SRV_LOG" || true)
      [ "$up" -ge "$ndev" ] && break
    elif [ -n "$SRV_SOCK" ] && [ -S "$SRV_SOCK" ]; then
      break
    fi
    if ! kill -0 "$SRV_PID" 2>/dev/null; then
      wait "$SRV_PID"; rc=$?; SRV_PID=""
      fail "server exited ($rc) before it was ready"
    fi
    i=$((i + 1))
    [ $i -lt 600 ] || fail "server not ready after 60 s"
    sleep 0.1
  done
}

stop_srv() {
  sig=${1:-TERM}
  [ -n "$SRV_PID" ] || fail "stop_srv: no server"
  kill -"$sig" "$SRV_PID"
  i=0
  while kill -0 "$SRV_PID" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 300 ] || { kill -9 "$SRV_PID"; fail "server did not exit within 30 s of SIG$sig"; }
    sleep 0.1
  done
  wait "$SRV_PID"; rc=$?
  SRV_PID=""
  [ $rc -eq 0 ] || fail "server exited with $rc after SIG$sig"
}

expect_exit() {
  want=$1; shift
  "$@" 2>"$WORKDIR/err" >"$WORKDIR/out"; rc=$?
  [ $rc -eq "$want" ] || fail "'$*' exited $rc, expected $want: $(cat "$WORKDIR/err")"
}

roundtrip() {
  dd if=/dev/urandom of=/tmp/rt.in bs=1M count="$2" 2>/dev/null
  dd if=/tmp/rt.in of="$1" bs=1M oflag=direct 2>/dev/null || fail "O_DIRECT write to $1 failed"
  dd if="$1" of=/tmp/rt.out bs=1M count="$2" iflag=direct 2>/dev/null || fail "O_DIRECT read of $1 failed"
  cmp /tmp/rt.in /tmp/rt.out || fail "$1: $2 MiB read back differ from what was written"
}

fsck_clean() {
  out=$(e2fsck -fn "$1" 2>&1) || fail "e2fsck -fn $1: $out"
}
