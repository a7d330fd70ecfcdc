#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 040-fio — fio's nbd engine (libnbd): 4 jobs = 4 connections at iodepth 32
# write random 4k blocks with crc32c verify headers and read them back;
# then mixed sizes 4k..1M; then a separate verify-only pass on fresh
# connections proves the data outlived the connections that wrote it.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"


start_server --backing mem:512M --nbd "unix:$SOCK"

# 4 jobs, each its own 64 MiB quarter (so verify headers never race).
common=(--numjobs=4 --size=64M --offset_increment=64M --iodepth=32
        --verify=crc32c --verify_fatal=1 --verify_backlog=0 --do_verify=1)
run_fio "randwrite 4k verify" --name=rw4k --rw=randwrite --bs=4k "${common[@]}"
# The same blocks verified again on new connections (writes already done).
run_fio "verify-only 4k" --name=rw4k --rw=randwrite --bs=4k "${common[@]}" --verify_only=1

# Mixed sizes 4k..1M in the upper 256 MiB.
mixed=(--numjobs=4 --size=64M --offset=256M --offset_increment=64M --iodepth=32
       --bssplit=4k/30:8k/10:16k/10:64k/20:128k/10:512k/10:1m/10 --blockalign=4k
       --verify=crc32c --verify_fatal=1 --do_verify=1)
run_fio "randwrite mixed verify" --name=mixed --rw=randwrite "${mixed[@]}"
run_fio "verify-only mixed" --name=mixed --rw=randwrite "${mixed[@]}" --verify_only=1

# Mixed random read/write traffic with flushes across the whole export
# (no verify: the jobs overlap); afterwards the 4k area must be rewritten
# and verify again, proving the server still serves correct data.
run_fio "randrw mixed + fsync" --name=rrw --rw=randrw --rwmixread=50 --numjobs=4 --iodepth=16 \
  --bsrange=512-256k --blockalign=512 --fsync=16 --size=512M --io_size=64M
run_fio "randwrite 4k verify again" --name=rw4k --rw=randwrite --bs=4k "${common[@]}"

# Sequential 1 MiB writes ending in a flush, verified with sha256.
run_fio "seq write 1M verify" --name=seq --rw=write --bs=1M --numjobs=1 --size=128M --iodepth=8 \
  --verify=sha256 --verify_fatal=1 --do_verify=1 --end_fsync=1
stop_server
