#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 110-ctl-knobs — `ubcache ctl` against a running daemon:
#  - show lists every DESIGN.md §4 knob with bcache's default (auto for
#    sequential_cutoff and the congested thresholds, issue 13);
#  - set then get round-trips (human sizes too); a bad value or unknown name
#    is refused (exit 1, the valid range named) and the old value is kept;
#  - exit status 0 / 1 (daemon error) / 2 (usage, unreachable socket), one
#    message each;
#  - the socket is 0600 and a second user (nobody: not root, not the
#    daemon's uid) is refused;
#  - curl of --metrics-listen and `ctl metrics` are valid Prometheus text
#    (strict per-line check: prom_check.py); --json output is JSON;
#  - doc/control.md's attribute table is what `ctl --list` prints.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

diff <(sed -n '/^<!-- BEGIN ATTRIBUTES/,/^<!-- END ATTRIBUTES/p' "$UBCACHE_SRC/doc/control.md" | sed '1d;$d') \
  <("$UBCACHE" ctl --list) >"$WORK/doc.diff" ||
  fail "doc/control.md's attribute table differs from 'ubcache ctl --list' (regenerate it): $(head -n 20 "$WORK/doc.diff")"

truncate -s 256M "$WORK/cache.img"
truncate -s 64M "$WORK/backing.img"
PORT=$(free_tcp_port)
start_server --cache "$WORK/cache.img" --backing "$WORK/backing.img" --nbd "unix:$SOCK" \
  --control "$CTL_SOCK" --metrics-listen "127.0.0.1:$PORT"

# ---- show: every knob, bcache's defaults (the adaptive three: auto) ----
show=$(ctl show) || fail "ctl show exited $?"
for kv in "cache_mode writethrough" "sequential_cutoff auto" "congested_read_threshold_us auto" \
  "congested_write_threshold_us auto" "cache_replacement_policy lru" "writeback_percent 10" \
  "writeback_delay 30" "writeback_running 1" "writeback_rate 524288" "writeback_rate_update_seconds 5" \
  "writeback_rate_p_term_inverse 40" "writeback_rate_i_term_inverse 10000" "writeback_rate_minimum 4096" \
  "btree_cache_size 67108864" "cutoff_writeback 40" "cutoff_writeback_sync 70" "dirty_data 0" \
  "stats_total/cache_hits 0" "priority_stats/dirty_percent 0"; do
  grep -qxF -- "$kv" <<<"$show" || fail "ctl show lacks the line '$kv':
$show"
done
for g in backing_device cache_set cache_device stats_total stats_five_minute stats_hour stats_day internal; do
  grep -q "^# $g" <<<"$show" || fail "ctl show has no group $g"
done

# ---- set / get ----
[[ $(ctl set sequential_cutoff 8M) == "sequential_cutoff 8388608" ]] || fail "set sequential_cutoff 8M"
[[ $(ctl get sequential_cutoff) == 8388608 ]] || fail "get after set: $(ctl get sequential_cutoff)"
[[ $(ctl set cache_replacement_policy fifo) == "cache_replacement_policy fifo" ]] || fail "set policy"
[[ $(ctl get cache_replacement_policy) == fifo ]] || fail "get policy"
ctl set writeback_percent 20 >/dev/null && [[ $(ctl get writeback_percent) == 20 ]] || fail "writeback_percent"

# expect_exit CODE STDERR_NEEDLE CMD... — exit status and one-line message.
expect_exit() {
  local want=$1 needle=$2 rc=0 err
  shift 2
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc == "$want" ]] || fail "'$*' exited $rc, want $want (stderr: $err)"
  grep -qF -- "$needle" <<<"$err" || fail "'$*': stderr lacks '$needle': $err"
  [[ $(grep -c . <<<"$err") -le 2 ]] || fail "'$*': more than one message: $err"
}
expect_exit 1 "valid: auto, or 0..4294967295 bytes" ctl set sequential_cutoff 12parsecs
[[ $(ctl get sequential_cutoff) == 8388608 ]] || fail "a refused set changed the value"
expect_exit 1 "valid: 0..40 percent" ctl set writeback_percent 41
[[ $(ctl get writeback_percent) == 20 ]] || fail "a refused writeback_percent changed the value"
expect_exit 1 "writethrough, writeback, writearound, none" ctl set cache_mode sometimes
[[ $(ctl get cache_mode) == writethrough ]] || fail "a refused cache_mode changed the value"
expect_exit 1 "no attribute 'no_such_knob'" ctl get no_such_knob
expect_exit 1 "read-only" ctl set stats_total/cache_hits 5
expect_exit 1 "no device 'nosuch'" ctl --device nosuch show
expect_exit 2 "unknown command 'frobnicate'" ctl frobnicate
expect_exit 2 "usage: ubcache ctl set NAME VALUE" ctl set sequential_cutoff
expect_exit 2 "cannot reach the daemon" "$UBCACHE" ctl --control "$WORK/none.sock" show
expect_exit 0 "" ctl clear-stats

# ---- the socket: 0600, root or the daemon's uid only ----
[[ $(stat -c %a "$CTL_SOCK") == 600 ]] || fail "control socket mode $(stat -c %a "$CTL_SOCK"), want 600"
chmod 711 "$WORK"  # mktemp's 0700 would refuse nobody before the socket does
rc=0
err=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$UBCACHE" ctl --control "$CTL_SOCK" \
  set sequential_cutoff 0 2>&1) || rc=$?
[[ $rc == 2 ]] && grep -q "Permission denied" <<<"$err" || fail "user nobody was not refused (exit $rc): $err"
[[ $(ctl get sequential_cutoff) == 8388608 ]] || fail "user nobody changed sequential_cutoff"
# SO_PEERCRED refuses even when the mode is loosened.
chmod 666 "$CTL_SOCK"
rc=0
err=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$UBCACHE" ctl --control "$CTL_SOCK" \
  set sequential_cutoff 0 2>&1) || rc=$?
[[ $rc == 1 ]] && grep -q "permission denied: uid 65534" <<<"$err" ||
  fail "SO_PEERCRED did not refuse user nobody (exit $rc): $err"
[[ $(ctl get sequential_cutoff) == 8388608 ]] || fail "user nobody changed sequential_cutoff"
chmod 600 "$CTL_SOCK"

# ---- metrics ----
curl -sf "http://127.0.0.1:$PORT/metrics" -o "$WORK/metrics.txt" || fail "curl of the metrics endpoint failed"
python3 "$INTEGRATION_DIR/prom_check.py" "$WORK/metrics.txt" >&2 || fail "the metrics endpoint is not valid Prometheus text"
ctl metrics >"$WORK/metrics2.txt" || fail "ctl metrics"
python3 "$INTEGRATION_DIR/prom_check.py" "$WORK/metrics2.txt" >&2 || fail "ctl metrics is not valid Prometheus text"
for m in 'ubcache_cache_hits_total{device="ubcache"}' 'ubcache_sequential_cutoff_bytes{device="ubcache"} 8388608' \
  'ubcache_priority_stats_unused_percent' 'ubcache_cache_mode{device="ubcache",mode="writethrough"} 1'; do
  grep -qF -- "$m" "$WORK/metrics.txt" || fail "metrics lack $m"
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/nosuch") == 404 ]] || fail "no 404 for /nosuch"

# ---- JSON ----
ctl --json show | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["sequential_cutoff"] == 8388608, d' ||
  fail "ctl --json show is not the expected JSON"
ctl --json priority-stats | python3 -c 'import json,sys; d=json.load(sys.stdin); assert len(d["quantiles"]) == 31' ||
  fail "ctl --json priority-stats"
server_alive "after every ctl command"
stop_server
[[ ! -e $CTL_SOCK ]] || fail "the control socket was left behind"
