#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 113-ctl-stall — statistics reads never stall I/O (issue 5; bcache's
# Launchpad 1840043), shortened from bench/ctl_stall.sh: a cache of 1M
# buckets (64 GiB sparse file, 64 KiB buckets), fio 4 KiB randread QD32
# through NBD over a warmed 256 MiB working set, 4 x 3 s without and with a
# poller querying priority-stats, stats and metrics 100 times a second, and
# one 16 s run polled in every other second.
# Asserts: IOPS with polling >= 0.9 x without (the bench's target is 0.99;
# this machine is shared, so the test allows noise and takes the better of
# two attempts), every query answered ok, and queries answered inside the
# daemon (request received to reply queued) in < 5 ms at p99. The maximum
# is reported with the client-side p99/max, not asserted: on a shared
# 2-vCPU VM a single request sometimes takes 10-20 ms because the whole VM
# pauses (perf sched shows both CPUs without an event meanwhile; see
# doc/control.md).
# ctest: run alone
source "$(dirname "$0")/lib.sh"

attempt() {
  DIR=$WORK/stall UBCACHE=$UBCACHE CACHE_SIZE=64G BUCKET=64k WS=256M RUNTIME=3 REPEAT=4 ALT_SECONDS=16 RATE=100 \
    bash "$UBCACHE_SRC/bench/ctl_stall.sh" 2>"$WORK/stall.log" >"$WORK/stall.json" ||
    fail "bench/ctl_stall.sh failed: $(tail -n 20 "$WORK/stall.log")"
  log "$(cat "$WORK/stall.json")"
  python3 - "$WORK/stall.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
if d["buckets"] < 1 << 20: bad.append(f"only {d['buckets']} buckets")
if d["query_errors"]: bad.append(f"{d['query_errors']} queries failed")
if d["queries"] < 1000: bad.append(f"only {d['queries']} queries")
if d["server_wall_p99_us"] >= 5000: bad.append(f"queries took {d['server_wall_p99_us']} us at p99 in the daemon")
ratio = max(d["ratio"], d["ratio_median"], d["alternate"]["ratio_median"])
if ratio < 0.9: bad.append(f"IOPS ratio {ratio} with polling")
print("; ".join(bad))
sys.exit(1 if bad else 0)
EOF
}
if ! why=$(attempt); then
  log "first attempt: $why; once more (shared machine)"
  why=$(attempt) || fail "$why"
fi
