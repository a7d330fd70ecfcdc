# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# bench/suites/common.sh — sourced by every suite (after set -euo pipefail).
#
# A suite is one executable script, bench/suites/NAME.sh, run by bench/run
# in its own session (so bench/run can stop every process it left) with
# stdout and stderr going to logs/NAME.log. Its environment:
#   SUITE_DIR  where it writes result.json (the data summary.py renders)
#              and any raw files it keeps (fio JSON, the scripts' .json/.md)
#   UBCACHE    the ubcache binary under test; POLLER: bench/ctl_poller
#   QUICK      1 under bench/run --quick: short runs, small files
#   WORK       where device files go (the local disk: O_DIRECT, not tmpfs)
#   RUN_*      progress (see bench/lib.sh, bench_progress)
# Exit status: 0 measured, 3 not implemented yet, anything else failed.
# Run alone (bench/suites/NAME.sh) it takes the defaults below.
suites=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bench=$(cd "$suites/.." && pwd)
repo=$(cd "$bench/.." && pwd)
. "$bench/lib.sh"

SUITE=$(basename "$0" .sh)
QUICK=${QUICK:-0}
UBCACHE=${UBCACHE:-$repo/build/ubcache}
POLLER=${POLLER:-$(dirname "$UBCACHE")/bench/ctl_poller}
RESPONDER=${RESPONDER:-$(dirname "$UBCACHE")/bench/nbd_min_responder}
WORK=${WORK:-/var/tmp/ubcache-bench/run}
SUITE_DIR=${SUITE_DIR:-$bench/results/$SUITE-$(date +%Y%m%d-%H%M%S)}
export UBCACHE POLLER
mkdir -p "$SUITE_DIR" "$WORK"
[[ -x $UBCACHE ]] || { echo "$SUITE: $UBCACHE is not an executable" >&2; exit 2; }
[[ $WORK == /tmp || $WORK == /tmp/* ]] && echo "$SUITE: warning: $WORK is under /tmp, which may be tmpfs (no O_DIRECT)" >&2

# suite_not_implemented WHAT: records that the suite does not exist yet (no
# numbers) and exits 3.
suite_not_implemented() {
  echo "$SUITE: not yet implemented: $*" >&2
  "${PYTHON:-python3}" -c 'import json, sys; json.dump({"not_implemented": True, "plan": sys.argv[2]}, open(sys.argv[1], "w"), indent=2)' \
    "$SUITE_DIR/result.json" "$*"
  exit 3
}

# newest GLOB: the newest file matching GLOB, or nothing.
newest() {
  local f
  f=$(ls -t $1 2>/dev/null | head -1) || true
  [[ -n $f ]] && echo "$f"
  return 0
}

# --- ext4 on an export or on a file -----------------------------------------
# fs_setup: a scratch directory ($FS_TMP) with the mount point ($MNT); call
# once, before the first fs_up. fs_down (and the EXIT trap it installs)
# unmounts and stops what fs_up started.
fs_setup() {
  FS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/$SUITE.XXXXXX")
  MNT=$FS_TMP/mnt
  mkdir -p "$MNT" "$FS_TMP/fuse"
  LOOP="" SRV="" FUSE=""
  trap 'fs_down; rm -rf "$FS_TMP"' EXIT
}

# serve_up LOG ARGS...: `ubcache serve ARGS... --nbd unix:$FS_TMP/s.sock`
# in the background ($SRV), logging to LOG, with `--control $FS_TMP/c.ctl`
# when ARGS have a --cache; waits for the socket.
serve_up() {
  local log=$1 a ctl=(); shift
  for a in "$@"; do [[ $a == --cache ]] && ctl=(--control "$FS_TMP/c.ctl"); done
  rm -f "$FS_TMP/s.sock"
  "$UBCACHE" serve "$@" --nbd "unix:$FS_TMP/s.sock" "${ctl[@]}" >>"$log" 2>&1 &
  SRV=$!
  for _ in $(seq 100); do [[ -S $FS_TMP/s.sock ]] && break; kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
  [[ -S $FS_TMP/s.sock ]] || { echo "$SUITE: ubcache serve $* did not start: $(tail -n 3 "$log")" >&2; return 1; }
}

# ctl ARGS...: `ubcache ctl` on the daemon serve_up started.
ctl() { "$UBCACHE" ctl --control "$FS_TMP/c.ctl" "$@"; }

# fs_up_export | fs_up_file PATH, then fs_mkfs LOG: ext4 at $MNT, on the
# export serve_up started (through nbdfuse + losetup) or on PATH alone
# (losetup --direct-io, the cache device without ubcache). FS_MOUNT_OPTS
# (e.g. discard) are ext4's mount options, the same for every target.
fs_up_export() {
  nbdfuse ${NBDFUSE_ARGS:-} "$FS_TMP/fuse/disk" --unix "$FS_TMP/s.sock" 2>>"$SUITE_DIR/nbdfuse.log" &
  FUSE=$!
  for _ in $(seq 200); do [[ -f $FS_TMP/fuse/disk ]] && break; sleep 0.1; done
  [[ -f $FS_TMP/fuse/disk ]] || { echo "$SUITE: nbdfuse did not come up" >&2; return 1; }
  # Direct I/O: without it the loop device reads through the page cache of
  # nbdfuse's file, and reads never reach the export. 4 KiB sectors: the
  # export serves 4 KiB blocks, and direct I/O passes the filesystem's
  # request sizes through.
  LOOP=$(losetup -f --show --direct-io=on --sector-size 4096 "$FS_TMP/fuse/disk")
  [[ $(cat "/sys/block/${LOOP#/dev/}/loop/dio") == 1 ]] ||
    echo "$SUITE: warning: $LOOP over nbdfuse does not use direct I/O: the page cache hides reads from the export" >&2
}
fs_up_file() { LOOP=$(losetup -f --show --direct-io=on "$1"); }
fs_mkfs() {
  mkfs.ext4 -q -F -E nodiscard "$LOOP" >"$1" 2>&1
  mount -t ext4 ${FS_MOUNT_OPTS:+-o "$FS_MOUNT_OPTS"} "$LOOP" "$MNT"
}

fs_down() {
  set +e
  mountpoint -q "$MNT" && { timeout 60 umount "$MNT" || umount -l "$MNT"; }
  [[ -n $LOOP ]] && losetup -d "$LOOP"
  if [[ -n $FUSE ]]; then timeout 30 fusermount3 -u "$FS_TMP/fuse" 2>/dev/null || fusermount3 -uz "$FS_TMP/fuse"; wait "$FUSE" 2>/dev/null; fi
  [[ -n $SRV ]] && { kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; }
  LOOP="" SRV="" FUSE=""
  set -e
}

# sized_file PATH SIZE: PATH exists with exactly SIZE bytes (fallocated; its
# old contents are kept when the size is right: the suites format them).
sized_file() {
  [[ $(stat -c %s "$1" 2>/dev/null || echo 0) == $(to_bytes "$2") ]] || { rm -f "$1"; fallocate -l "$2" "$1"; }
}
