#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 020-nbdcopy — nbdcopy (multi-connection, large requests) copies 256 MiB of
# random data into the export and back out byte-identical, on mem: and on a
# file opened with O_DIRECT; for the file, the bytes must also be in the
# backing file after a clean shutdown and survive a restart.
source "$(dirname "$0")/lib.sh"

src=$WORK/src.img
random_file "$src" 256

# copy_roundtrip LABEL — $src → export → $WORK/out.img, compare.
copy_roundtrip() {
  local label=$1 out=$WORK/out.img
  rm -f "$out"
  timeout 300 nbdcopy --connections=4 --requests=16 "$src" "$(nbd_uri)" ||
    fail "$label: nbdcopy into the export failed"
  server_alive "$label: after nbdcopy in"
  timeout 300 nbdcopy --connections=4 "$(nbd_uri)" "$out" ||
    fail "$label: nbdcopy out of the export failed"
  cmp "$src" "$out" || fail "$label: data read back differs from data written (cmp above)"
  # Again with one connection and 4 MiB requests.
  rm -f "$out"
  timeout 300 nbdcopy --connections=1 --request-size=4194304 "$(nbd_uri)" "$out" ||
    fail "$label: single-connection nbdcopy out failed"
  cmp "$src" "$out" || fail "$label: single-connection read back differs"
  rm -f "$out"
}

# --- memory backing
start_server --backing mem:256M --nbd "unix:$SOCK"
copy_roundtrip "mem:256M"
# One WRITE_ZEROES over the whole export (no payload, so larger than the
# 32 MiB maximum block size is allowed), then every byte reads as zero.
timeout 120 nbdsh -u "$(nbd_uri)" -c '
size = h.get_size()
h.zero(size, 0)
step = 32 << 20
for off in range(0, size, step):
    buf = h.pread(step, off)
    if buf.count(0) != len(buf):
        i = next(i for i, b in enumerate(buf) if b)
        raise SystemExit(f"byte {off + i} is {buf[i]:#x} after WRITE_ZEROES of the whole export")
' || fail "mem:256M: zeroing the whole export did not read back as zeros"
stop_server

# --- file backing, opened with O_DIRECT by the server
img=$WORK/backing.img
truncate -s 256M "$img"
start_server --backing "$img" --nbd "unix:$SOCK"
copy_roundtrip "file backing"
stop_server
cmp "$src" "$img" || fail "file backing: after SIGTERM the backing file does not hold the written data"

# Restart on the same file: the data is read from it.
start_server --backing "$img" --nbd "unix:$SOCK" --read-only
timeout 300 nbdcopy "$(nbd_uri)" "$WORK/again.img" || fail "nbdcopy after restart failed"
cmp "$src" "$WORK/again.img" || fail "file backing: data differs after restart"
stop_server
