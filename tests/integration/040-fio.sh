#!/usr/bin/env bash
# 040-fio — fio's nbd engine (libnbd): 4 jobs = 4 connections at iodepth 32
# write random 4k blocks with crc32c verify headers and read them back;
# then mixed sizes 4k..1M; then a separate verify-only pass on fresh
# connections proves the data outlived the connections that wrote it.
source "$(dirname "$0")/lib.sh"

# run_fio LABEL ARGS... — fio must exit 0 and every job report error 0 and
# move bytes; its JSON output is kept in $WORK.
run_fio() {
  local label=$1; shift
  local json=$WORK/fio.${label//[^a-z0-9]/_}.json rc=0
  # In $WORK, without state files: fio would drop *-verify.state into the cwd.
  (cd "$WORK" && timeout 400 fio --output-format=json --output="$json" --ioengine=nbd --uri="$(nbd_uri)" \
    --verify_state_save=0 --group_reporting=0 "$@") 2>"$WORK/fio.stderr" || rc=$?
  [[ $rc -eq 0 ]] || fail "$label: fio exited $rc: $(tail -n 20 "$WORK/fio.stderr"; grep -m5 -i 'err\|verify' "$json" || true)"
  python3 - "$json" "$label" <<'EOF' || fail "$label: fio reported errors (above)"
import json, sys
text = open(sys.argv[1]).read()
# fio may print notes before the JSON document.
doc = json.loads(text[text.index("{"):])
bad = False
for job in doc["jobs"]:
    moved = job["read"]["io_bytes"] + job["write"]["io_bytes"]
    if job["error"] != 0 or moved == 0:
        print(f"  job {job['jobname']}: err={job['error']} read={job['read']['io_bytes']} "
              f"write={job['write']['io_bytes']}", file=sys.stderr)
        bad = True
sys.exit(1 if bad else 0)
EOF
  grep -qi 'verify.*fail\|bad magic\|crc32c.*mismatch' "$WORK/fio.stderr" &&
    fail "$label: fio reported a verify failure: $(grep -i -m5 'verify\|magic\|crc' "$WORK/fio.stderr")"
  server_alive "$label"
}

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
