#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 165-service — serve as a systemd service runs it (contrib/systemd):
#  1. --config FILE: options one per line (`name value`, `name=value`,
#     `--name value`, flags alone, # comments), the command line winning;
#     usage errors name FILE:LINE and exit 2; the example config parses;
#     --recover auto without --ublk-id, --set without ATTR=VALUE or with an
#     unknown attribute exit 2;
#  2. the notification protocol on $NOTIFY_SOCKET: READY=1 with a STATUS=
#     line of the exact shape once the export is served, STATUS= refreshed
#     (hit ratio, dirty data), STOPPING=1 at SIGTERM;
#  3. SIGHUP re-reads the file: changed knobs (cache-mode, --set, policy,
#     sequential-cutoff) apply at once (RELOADING=1 then READY=1), a knob
#     set with ctl and not changed in the file keeps its value, a changed
#     start-only option is reported and not applied, a broken file changes
#     nothing and the daemon carries on;
#  4. `systemd-analyze verify` passes on ubcache@.service.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

expect_usage() {  # LABEL NEEDLE ARGS... — serve exits 2 naming NEEDLE
  local label=$1 needle=$2 rc=0 out
  shift 2
  out=$(timeout 20 "$UBCACHE" serve "$@" 2>&1) || rc=$?
  ((rc == 2)) || fail "$label: exit $rc (want 2): $out"
  expect_contains "$out" "$needle" "$label"
}

format_cache_backing 64M 64M
CONF=$WORK/svc.conf
CTL_SOCK=$WORK/ctl.sock

# ---- 1. the file's syntax and its errors ----
printf 'backing %s\n# a comment\n\nbogus 1\n' "$BACKING" >"$CONF"
expect_usage "unknown option in the file" "$CONF:4: unknown option 'bogus'" --config "$CONF" --nbd "unix:$SOCK"
printf 'backing %s\ncache-mode\n' "$BACKING" >"$CONF"
expect_usage "option without its value" "$CONF:2: cache-mode needs a value (MODE)" --config "$CONF" --nbd "unix:$SOCK"
printf 'config /etc/x.conf\n' >"$CONF"
expect_usage "config in the file" "$CONF:1: --config cannot be given in a file" --config "$CONF"
expect_usage "missing file" "$WORK/none.conf: No such file or directory" --config "$WORK/none.conf"
expect_usage "recover auto without ids" "--recover auto needs --ublk-id N" --backing "$BACKING" --ublk --recover auto
expect_usage "--set without =" "--set writeback_percent: expected ATTR=VALUE" --backing "$BACKING" \
  --cache "$CACHE" --nbd "unix:$SOCK" --set writeback_percent
expect_usage "--set of no attribute" "--set no_such_knob=1" --backing "$BACKING" --cache "$CACHE" \
  --nbd "unix:$SOCK" --set no_such_knob=1
# The shipped example parses: serve gets as far as opening its devices.
expect_usage "the example config" "/dev/sdb: No such file or directory" --config "$UBCACHE_SRC/contrib/systemd/ubcache.conf.example" \
  --recover auto

# ---- 2. under a service manager ----
NOTES=$WORK/notes
python3 - "$WORK/notify.sock" "$NOTES" <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as f:
    while True:
        f.write(s.recv(4096).decode().replace("\n", "|") + "\n")
        f.flush()
PY
LISTENER=$!
on_exit "kill $LISTENER"
for _ in $(seq 50); do [[ -S $WORK/notify.sock ]] && break; sleep 0.1; done
cat >"$CONF" <<CONF
# what ubcache@NAME.service would read
--backing $BACKING
cache = $CACHE
control $CTL_SOCK
cache-mode "writethrough"
congested-read-threshold-us 100
set writeback_percent=20
set writeback_running=0
CONF
# The command line wins over the file (the read threshold), and --recover
# auto without --ublk has nothing to do.
export NOTIFY_SOCKET=$WORK/notify.sock
start_server --config "$CONF" --nbd "unix:$SOCK" --congested-read-threshold-us 300 --recover auto
unset NOTIFY_SOCKET
wait_note() {  # REGEX WHAT — waits up to 12 s for a notification line
  local i
  for i in $(seq 120); do grep -qE -- "$1" "$NOTES" 2>/dev/null && return 0; sleep 0.1; done
  fail "$2: no notification matching '$1' in: $(cat "$NOTES" 2>/dev/null)"
}
wait_note '^READY=1\|STATUS=1 export, writethrough; hit ratio - \(5 min -\); dirty 0 B$' "READY=1 at start"
[[ $(ctl get cache_mode) == writethrough ]] || fail "cache-mode from the file: $(ctl get cache_mode)"
[[ $(ctl get congested_read_threshold_us) == 300 ]] || fail "the command line's threshold lost to the file's"
[[ $(ctl get writeback_percent) == 20 ]] || fail "--set in the file: writeback_percent $(ctl get writeback_percent)"

# ---- 3. SIGHUP ----
ctl set writeback_delay 7 >/dev/null
sed -i 's/^set writeback_percent=20/set writeback_percent=30/; /^cache-mode/d' "$CONF"
printf 'sequential-cutoff=1M\nbucket-size 1M\n' >>"$CONF"
: >"$NOTES"
kill -HUP "$SERVER_PID"
wait_note '^READY=1\|STATUS=' "READY=1 after the reload"
grep -q '^RELOADING=1|MONOTONIC_USEC=[0-9]*$' "$NOTES" || fail "no RELOADING=1 before READY=1: $(cat "$NOTES")"
[[ $(ctl get writeback_percent) == 30 ]] || fail "reload: writeback_percent $(ctl get writeback_percent)"
[[ $(ctl get sequential_cutoff) == 1048576 ]] || fail "reload: sequential_cutoff $(ctl get sequential_cutoff)"
[[ $(ctl get writeback_delay) == 7 ]] || fail "reload: writeback_delay set with ctl did not keep its value"
# cache-mode left the file: it keeps what it was.
[[ $(ctl get cache_mode) == writethrough ]] || fail "reload: cache_mode $(ctl get cache_mode)"
grep -q "SIGHUP: $CONF: --bucket-size changed; it takes effect when serve starts again" "$SERVER_LOG" ||
  fail "reload: no word on the start-only option"
grep -q "SIGHUP: re-read $CONF: set sequential_cutoff=1M, writeback_percent=30$" "$SERVER_LOG" ||
  fail "reload: no summary of what was set"
# --policy bcache: the single knobs it implies, except those the file or
# the command line refine; then writeback, and the STATUS= line follows.
printf 'policy bcache\ncache-mode writeback\n' >>"$CONF"
kill -HUP "$SERVER_PID"
for _ in $(seq 50); do [[ $(ctl get cache_mode) == writeback ]] && break; sleep 0.1; done
[[ $(ctl get cache_mode) == writeback ]] || fail "reload: cache-mode writeback not applied"
[[ $(ctl get congested_read_threshold_us) == 300 ]] || fail "policy bcache overrode the command line"
[[ $(ctl get congested_write_threshold_us) == 20000 ]] || fail "policy bcache: write threshold"
[[ $(ctl get sequential_cutoff) == 1048576 ]] || fail "policy bcache overrode the file's sequential-cutoff"
qio "writes and reads" "write -q -P 7 0 256k" "read -q -P 7 0 256k"
: >"$NOTES"
wait_note '^STATUS=1 export, writeback; hit ratio 100% \(5 min 100%\); dirty 256 KiB$' "STATUS= after I/O"
# A broken file: nothing changes, the daemon carries on.
echo "bogus" >>"$CONF"
sed -i 's/^set writeback_percent=30/set writeback_percent=35/' "$CONF"
kill -HUP "$SERVER_PID"
for _ in $(seq 50); do grep -q "unknown option 'bogus'; nothing changes" "$SERVER_LOG" && break; sleep 0.1; done
grep -q "SIGHUP: $CONF:[0-9]*: unknown option 'bogus'; nothing changes" "$SERVER_LOG" || fail "broken file: no error"
[[ $(ctl get writeback_percent) == 30 ]] || fail "broken file: writeback_percent changed anyway"
qio "after the broken reload" "read -q -P 7 0 256k"
: >"$NOTES"
stop_server
grep -q '^STOPPING=1$' "$NOTES" || fail "no STOPPING=1 at SIGTERM: $(cat "$NOTES")"

# ---- 4. the unit ----
mkdir -p "$WORK/units"
sed "s|/usr/bin/ubcache|$UBCACHE|" "$UBCACHE_SRC/contrib/systemd/ubcache@.service" >"$WORK/units/ubcache@test.service"
# --man=no: the man pages are checked installed (164-package), not here.
out=$(systemd-analyze verify --man=no "$WORK/units/ubcache@test.service" 2>&1) ||
  fail "systemd-analyze verify: $out"
[[ -z $out ]] || fail "systemd-analyze verify warned: $out"
grep -q '^ExecStart=/usr/bin/ubcache serve --config /etc/ubcache/%i.conf --recover auto$' \
  "$UBCACHE_SRC/contrib/systemd/ubcache@.service" || fail "the unit's ExecStart changed: update 166-ublk-service too"
