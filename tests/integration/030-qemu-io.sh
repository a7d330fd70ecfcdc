#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 030-qemu-io — QEMU's NBD client: pattern writes read back verified
# (plain, FUA, async + flush, sub-sector read-modify-write), WRITE_ZEROES
# (plain, may-unmap, fast) reads back zeros, TRIM leaves neighbours alone,
# data persists across connections, and qemu-img convert/compare agree.
source "$(dirname "$0")/lib.sh"



start_server --backing mem:128M --nbd "unix:$SOCK"
M=$((1 << 20))

# Fill 0..16M with 0xa5, one write per MiB, then read it all back.
cmds=()
for i in $(seq 0 15); do cmds+=("write -q -P 0xa5 $((i * M)) 1M"); done
qio "fill 0xa5" "${cmds[@]}" "read -q -P 0xa5 0 16M"
qio "fill 0xa5 visible on a new connection" "read -q -P 0xa5 0 16M"
qio_must_fail "self-check" "read -q -P 0x5a 0 1M"

# FUA writes; aligned and 512-aligned but not 4k-aligned.
qio "FUA write" "write -q -f -P 0x5a 1M 64k" "write -q -f -P 0x5b 3584 1536" \
  "read -q -P 0x5a 1M 64k" "read -q -P 0x5b 3584 1536" \
  "read -q -P 0xa5 0 3584" "read -q -P 0xa5 5120 $((M - 5120))" "read -q -P 0xa5 $((M + 65536)) 64k"

# Sub-sector writes: qemu does read-modify-write at the 512-byte minimum.
qio "sub-sector write" "write -q -P 0x22 100 10" "read -q -P 0x22 100 10" \
  "read -q -P 0xa5 0 100" "read -q -P 0xa5 110 3474"

# Async writes then a flush; each region exact, the gaps untouched.
cmds=()
for i in $(seq 0 31); do cmds+=("aio_write -q -P $((0x30 + i)) $((4 * M + i * 65536)) 32k"); done
cmds+=("aio_flush")
for i in $(seq 0 31); do
  cmds+=("read -q -P $((0x30 + i)) $((4 * M + i * 65536)) 32k" "read -q -P 0xa5 $((4 * M + i * 65536 + 32768)) 32k")
done
qio "aio_write + aio_flush" "${cmds[@]}"
qio "aio data on a new connection" "read -q -P 0x3f $((4 * M + 15 * 65536)) 32k" "flush"

# WRITE_ZEROES: plain, may-unmap (-u), fast-zero (-n; the server advertises
# SEND_FAST_ZERO and mem: zeroing is cheap, so it must succeed).
qio "write_zeroes" "write -q -z 8M 1M" "read -q -P 0 8M 1M" \
  "read -q -P 0xa5 $((7 * M)) 1M" "read -q -P 0xa5 $((9 * M)) 1M"
qio "write_zeroes may-unmap" "write -q -z -u 10M 512k" "read -q -P 0 10M 512k" \
  "read -q -P 0xa5 $((10 * M + 524288)) 512k"
qio "write_zeroes fast" "write -q -z -n 11M 4k" "read -q -P 0 11M 4k" \
  "read -q -P 0xa5 $((11 * M + 4096)) 4k"
qio "write_zeroes sub-4k" "write -q -z 12M 512" "read -q -P 0 12M 512" "read -q -P 0xa5 $((12 * M + 512)) 3584"
qio "write_zeroes FUA" "write -q -z -f 13M 64k" "read -q -P 0 13M 64k"
qio "zeros persist" "read -q -P 0 8M 1M" "read -q -P 0 10M 512k"

# TRIM: contents of the range are unspecified afterwards; neighbours are not.
qio "discard" "discard -q 14M 1M" "read -q -P 0xa5 $((13 * M + 65536)) $((M - 65536))" \
  "read -q -P 0xa5 15M 1M"
# A trimmed range can be rewritten.
qio "write after discard" "write -q -P 0x77 14M 1M" "read -q -P 0x77 14M 1M"

# Requests at the very end of the device.
qio "end of device" "write -q -P 0x99 $((128 * M - 4096)) 4k" "read -q -P 0x99 $((128 * M - 4096)) 4k"
server_alive "after qemu-io"

# qemu-img: convert a random image into the export, compare it.
random_file "$WORK/rand.img" 32
truncate -s 128M "$WORK/rand.img"
timeout 120 qemu-img convert -n -f raw -O raw "$WORK/rand.img" "$(nbd_uri)" ||
  fail "qemu-img convert into the export failed"
out=$(timeout 120 qemu-img compare -f raw -F raw "$WORK/rand.img" "$(nbd_uri)" 2>&1) ||
  fail "qemu-img compare: export differs from the image: $out"
expect_contains "$out" "Images are identical" "qemu-img compare"
printf 'x' | dd of="$WORK/rand.img" bs=1 seek=$((5 * M + 7)) conv=notrunc status=none
if out=$(timeout 120 qemu-img compare -f raw -F raw "$WORK/rand.img" "$(nbd_uri)" 2>&1); then
  fail "qemu-img compare did not notice a changed byte: $out"
fi
out=$(timeout 60 qemu-img info -f raw "$(nbd_uri)" 2>&1) || fail "qemu-img info failed: $out"
expect_contains "$out" "virtual size: 128 MiB (134217728 bytes)" "qemu-img info"
stop_server
