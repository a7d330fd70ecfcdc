#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 162-grafana-metrics — contrib/grafana/ubcache.json against what the daemon
# really exposes:
#  - a writeback daemon (formatted cache and backing) serves /metrics after
#    writes, hits and misses; the text is valid Prometheus (prom_check.py)
#    and `ctl metrics` has the same families;
#  - the request counters and latency histogram count that I/O (requests
#    and bytes by operation, no errors, _count = requests_total, a
#    plausible mean), build_info has this binary's version and start_time
#    this daemon's start;
#  - grafana_check.py: the dashboard is valid JSON and a Grafana dashboard;
#    every panel has a datasource (the ${DS_PROMETHEUS} variable) and a
#    target; every expression parses as PromQL and every metric it (or a
#    variable's label_values) selects is in the exposition, NAME_bucket /
#    _sum / _count through their histogram family; every label in a
#    matcher, by(), on() or a legend is one the series has, and a fixed
#    matcher value matches an exposed series; rate() only of counters;
#  - the checker can fail: copies of the dashboard with a renamed metric, a
#    label the metric lacks, a value no series has, rate() of a gauge,
#    vectors joined on different labels, histogram_quantile() without le,
#    a panel without datasource or target, broken JSON — each reported by
#    name;
#  - a real Prometheus (Debian's package, from scripts/install-deps)
#    scrapes the daemon every second and runs every expression (variables
#    replaced as Grafana does): none may fail or come back empty.
# ctest: cost 60
source "$(dirname "$0")/lib.sh"

DASH=$UBCACHE_SRC/contrib/grafana/ubcache.json
CHECK=$INTEGRATION_DIR/grafana_check.py
[[ -f $DASH ]] || fail "no dashboard at $DASH"

format_cache_backing 128M 256M
PORT=$(free_tcp_port)
STARTED_AT=$(date +%s)
start_server --cache "$CACHE" --backing "$BACKING" --cache-mode writeback --nbd "unix:$SOCK" \
  --control "$CTL_SOCK" --metrics-listen "127.0.0.1:$PORT"
# Dirty data (writeback), hits (reads of what was written), misses (reads of
# the backing device), a flush.
qio "writes, hits and misses" "write -q -P 1 0 4M" "read -q -P 1 0 4M" "read -q -P 1 0 4M" \
  "read -q 64M 8M" "write -q -P 2 8M 64k" "read -q -P 2 8M 64k" "flush"

curl -sf "http://127.0.0.1:$PORT/metrics" -o "$WORK/metrics.txt" || fail "curl of the metrics endpoint failed"
python3 "$INTEGRATION_DIR/prom_check.py" "$WORK/metrics.txt" >&2 || fail "the metrics endpoint is not valid Prometheus text"
ctl metrics >"$WORK/ctl-metrics.txt" || fail "ctl metrics"
diff <(grep '^# TYPE' "$WORK/metrics.txt") <(grep '^# TYPE' "$WORK/ctl-metrics.txt") >"$WORK/families.diff" ||
  fail "ctl metrics and /metrics have different families: $(cat "$WORK/families.diff")"
# The I/O above reached the counters the dashboard plots.
grep -qE '^ubcache_cache_hits_total\{device="ubcache"\} [1-9]' "$WORK/metrics.txt" || fail "no cache hit counted"
grep -qE '^ubcache_cache_misses_total\{device="ubcache"\} [1-9]' "$WORK/metrics.txt" || fail "no cache miss counted"
grep -qE '^ubcache_dirty_data_bytes\{device="ubcache"\} [1-9]' "$WORK/metrics.txt" || fail "no dirty data"
# The request counters and the latency histogram count that I/O: at least
# the requests and bytes qemu-io sent (it may add reads and a flush of its
# own), none failed; each histogram's _count is ubcache_requests_total of
# the same scrape (prom_check.py above checked that the buckets rise to
# +Inf = _count); build_info names this binary's version; start_time is
# this daemon's start.
version=$("$UBCACHE" --version | awk '{print $2}')
out=$(python3 - "$WORK/metrics.txt" "$version" "$STARTED_AT" "$(date +%s)" 2>&1 <<'EOF'
import re, sys
text, version, started, now = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def value(name, **labels):
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{re.escape(name)}{re.escape('{' + sel + '}') if sel else ''} (\S+)$", text, re.M)
    if not m:
        sys.exit(f"no sample {name}{{{sel}}}")
    return float(m[1])
MiB = 1 << 20
# qio above: writes of 4M and 64k; reads of 4M twice, 8M and 64k; a flush.
want = {"write": (2, 4 * MiB + 64 * 1024), "read": (4, 16 * MiB + 64 * 1024), "flush": (1, None)}
for op, (n, nbytes) in want.items():
    got = value("ubcache_requests_total", device="ubcache", op=op)
    if got < n:
        sys.exit(f"ubcache_requests_total{{op={op}}} {got:g}: qemu-io sent at least {n}")
    if nbytes is not None and value("ubcache_request_bytes_total", device="ubcache", op=op) < nbytes:
        sys.exit(f"ubcache_request_bytes_total{{op={op}}} under the {nbytes} bytes qemu-io moved")
for op in ("read", "write", "flush", "discard", "write_zeroes", "cache"):
    n = value("ubcache_requests_total", device="ubcache", op=op)
    count = value("ubcache_request_duration_seconds_count", device="ubcache", op=op)
    total = value("ubcache_request_duration_seconds_sum", device="ubcache", op=op)
    if count != n:
        sys.exit(f"op {op}: histogram _count {count:g} != ubcache_requests_total {n:g}")
    if value("ubcache_request_errors_total", device="ubcache", op=op) != 0:
        sys.exit(f"op {op}: errors counted, but no request failed")
    if n and not 0 < total / n < 10:
        sys.exit(f"op {op}: mean latency {total / n:g} s (_sum / _count) is not plausible")
if value("ubcache_build_info", version=version) != 1:
    sys.exit(f"ubcache_build_info{{version={version}}} is not 1")
start = value("ubcache_start_time_seconds")
if not started - 1 <= start <= now:
    sys.exit(f"ubcache_start_time_seconds {start:g}: the daemon started between {started} and {now}")
print(f"requests: read {value('ubcache_requests_total', device='ubcache', op='read'):g}, "
      f"write {value('ubcache_requests_total', device='ubcache', op='write'):g}, "
      f"flush {value('ubcache_requests_total', device='ubcache', op='flush'):g}; version {version}")
EOF
) || fail "request metrics: $out"
log "$out"

# ---- the dashboard against the exposition ----
out=$(python3 "$CHECK" "$DASH" "$WORK/metrics.txt" 2>&1) ||
  fail "contrib/grafana/ubcache.json does not match the daemon's metrics:
$out"
log "$out"

# ---- the checker can fail ----
# mutate NAME PYTHON — a copy of the dashboard, $WORK/mut.NAME.json, after
# PYTHON changed `d` (the parsed dashboard) or `panels` (its non-row panels);
# sub(OLD, NEW) replaces OLD in every expression. It must change something.
mutate() {
  python3 - "$DASH" "$WORK/mut.$1.json" "$2" <<'EOF' || fail "mutation $1 did not apply (the dashboard changed?)"
import copy, json, sys
d = json.load(open(sys.argv[1]))
before = copy.deepcopy(d)
panels = [p for p in d["panels"] if p["type"] != "row"]
def sub(old, new):
    for p in panels:
        for t in p.get("targets", []):
            t["expr"] = t["expr"].replace(old, new)
exec(sys.argv[3])
if d == before:
    sys.exit(1)
json.dump(d, open(sys.argv[2], "w"), indent=2)
EOF
}
# caught NAME WANT — the checker fails on mutation NAME, saying WANT.
caught() {
  local o rc=0
  o=$(python3 "$CHECK" "$WORK/mut.$1.json" "$WORK/metrics.txt" 2>&1) || rc=$?
  ((rc == 1)) || fail "mutation $1: the checker exited $rc, want 1: $o"
  grep -qF -- "$2" <<<"$o" || fail "mutation $1: the checker did not say '$2':
$o"
}
mutate metric 'sub("ubcache_dirty_data_bytes", "ubcache_dirty_bytes")'
caught metric "metric ubcache_dirty_bytes is not in the exposition"
mutate label 'sub("ubcache_io_errors_total{instance=~\"$instance\"}",
                  "ubcache_io_errors_total{instance=~\"$instance\",device=~\"$device\"}")'
caught label "ubcache_io_errors_total has no label 'device'"
mutate value 'sub("window=\"five_minute\"", "window=\"5m\"")'
caught value 'ubcache_cache_hit_ratio_percent{window="5m"} matches no exposed series'
mutate gauge 'sub("rate(ubcache_io_errors_total", "rate(ubcache_io_error_limit")'
caught gauge "rate() of ubcache_io_error_limit, a gauge"
mutate join 'sub("+ on (instance) ubcache_cache_failed", "+ ubcache_cache_failed")'
caught join "between vectors with different labels"
mutate legend 'panels[0]["targets"][0]["legendFormat"] = "{{instance}} {{export}}"'
caught legend "uses {{export}}, not a label of the result"
mutate nole 'sub("sum by (instance, device, op, le) (rate(ubcache_request_duration_seconds_bucket",
                 "sum by (instance, device, op) (rate(ubcache_request_duration_seconds_bucket")'
caught nole "histogram_quantile() of a vector without an 'le' label"
mutate nodatasource 'del panels[1]["datasource"]'
caught nodatasource "no datasource"
mutate notarget 'panels[2]["targets"] = []'
caught notarget "no target"
mutate syntax 'panels[3]["targets"][0]["expr"] = "sum(rate(ubcache_cache_hits_total[5m])"'
caught syntax "does not parse as PromQL"
mutate variable 'panels[3]["targets"][0]["expr"] = "ubcache_running{device=~\"$export\"}"'
caught variable 'undefined variable $export'
head -c 2000 "$DASH" >"$WORK/mut.json.json"
caught json "not valid JSON"
log "the checker caught all 12 broken copies"

# ---- a real Prometheus runs every expression ----
command -v prometheus >/dev/null || fail "prometheus is missing (scripts/install-deps installs it)"
{
  PPORT=$(free_tcp_port)
  cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ubcache
    static_configs:
      - targets: ['127.0.0.1:$PORT']
EOF
  prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PPORT" >"$WORK/prometheus.log" 2>&1 &
  PROM_PID=$!
  on_exit 'kill $PROM_PID; wait $PROM_PID'
  deadline=$((SECONDS + 30))
  until curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null; do
    kill -0 "$PROM_PID" 2>/dev/null || fail "prometheus exited: $(tail -n 20 "$WORK/prometheus.log")"
    ((SECONDS < deadline)) || fail "prometheus not ready in 30 s: $(tail -n 20 "$WORK/prometheus.log")"
    sleep 0.2
  done
  # Scrapes while I/O runs, so rate() has samples to work on.
  for i in 1 2 3 4 5 6; do
    qio "I/O while Prometheus scrapes ($i)" "write -q -P $i $((i * 4))M 1M" "read -q -P $i $((i * 4))M 1M" \
      "read -q $((64 + i * 8))M 1M"
    sleep 1
  done
  deadline=$((SECONDS + 30))
  until [[ $(curl -sf "http://127.0.0.1:$PPORT/api/v1/query" \
    --data-urlencode 'query=count_over_time(ubcache_running[1m])' |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)') -ge 5 ]]; do
    ((SECONDS < deadline)) || fail "prometheus did not scrape the daemon 5 times in 30 s: $(tail -n 20 "$WORK/prometheus.log")"
    sleep 0.5
  done
  out=$(python3 "$CHECK" "$DASH" --prometheus "http://127.0.0.1:$PPORT" --var "instance=127.0.0.1:$PORT" \
    --var device=ubcache --var __rate_interval=10s --var __range=1m 2>&1) ||
    fail "Prometheus cannot run the dashboard's queries:
$out"
  log "$out"
}

server_alive "after the checks"
stop_server
log "ok"
