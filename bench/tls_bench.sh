#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tls_bench.sh — what NBD over TLS costs: one `ubcache serve --tls on` per
# credential kind, each driven in turn, in clear and over TLS, by the same
# client (`ubcache probe nbd:URI`, libnbd underneath; fio's nbd engine cannot
# pass libnbd a PSK or certificate file), on 4 KiB random reads at QD32 and
# 1 MiB sequential reads at QD4, from RAM (mem:) so the network path is all
# that is measured. Runs are interleaved and the order rotated per repeat;
# the table gives medians and TLS / plaintext ratios.
#
# Benchmarks are not tests: the exit status is non-zero only when a tool
# fails, never for a slow number.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

UBCACHE="$repo/build/ubcache"
OUT="$repo/bench/results"
SECONDS_PER=5
REPEAT=3
WORKLOADS="randread_4k_qd32,seqread_1m_qd4"

usage() {
  cat <<EOF
Usage: bench/tls_bench.sh [options]

Serves mem:1G with --tls on twice (PSK, X.509) and runs
\`ubcache probe --only $WORKLOADS\` through each export
in clear (nbd+unix://) and over TLS (nbds+unix://), interleaved.
Writes OUT/tls-<timestamp>.md and .json.

Options:
  --ubcache PATH   the binary (default: build/ubcache)
  --seconds N      seconds per workload and run (default $SECONDS_PER)
  --repeat N       runs of each (default $REPEAT)
  --out DIR        results directory (default: bench/results)
EOF
}

while [[ $# -gt 0 ]]; do
  case $1 in
    --ubcache) UBCACHE=${2:?}; shift 2 ;;
    --seconds) SECONDS_PER=${2:?}; shift 2 ;;
    --repeat) REPEAT=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "tls_bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $UBCACHE ]] || { echo "tls_bench.sh: $UBCACHE is not built" >&2; exit 2; }
for t in certtool psktool; do command -v $t >/dev/null || { echo "tls_bench.sh: $t missing (gnutls-bin)" >&2; exit 2; }; done

bench_setup tls_bench
mkdir -p "$OUT"

# Credentials, as 140-nbd-tls makes them.
creds=$raw/creds
mkdir -p "$creds/srv" "$creds/cli"
certtool --generate-privkey --outfile "$creds/ca-key.pem" 2>/dev/null
printf 'cn = "tls_bench CA"\nca\ncert_signing_key\nexpiration_days = 1\n' >"$creds/ca.info"
certtool --generate-self-signed --load-privkey "$creds/ca-key.pem" --template "$creds/ca.info" \
  --outfile "$creds/ca-cert.pem" 2>/dev/null
for role in server client; do
  dir=$creds/srv; [[ $role == client ]] && dir=$creds/cli
  certtool --generate-privkey --outfile "$dir/$role-key.pem" 2>/dev/null
  printf 'cn = "localhost"\ndns_name = "localhost"\ntls_www_%s\nencryption_key\nsigning_key\nexpiration_days = 1\n' \
    "$role" >"$dir/$role.info"
  certtool --generate-certificate --load-privkey "$dir/$role-key.pem" --load-ca-certificate "$creds/ca-cert.pem" \
    --load-ca-privkey "$creds/ca-key.pem" --template "$dir/$role.info" --outfile "$dir/$role-cert.pem" 2>/dev/null
  cp "$creds/ca-cert.pem" "$dir/"
done
psktool -u bench -p "$creds/keys.psk" >/dev/null

start_server psk "$UBCACHE" serve --backing mem:1G --nbd "unix:$raw/psk.sock" --tls on --tls-psk "$creds/keys.psk"
start_server x509 "$UBCACHE" serve --backing mem:1G --nbd "unix:$raw/x509.sock" --tls on \
  --tls-certificates "$creds/srv"
declare -A MODE_URI=(
  [plain]="nbd+unix:///?socket=$raw/psk.sock"
  [psk]="nbds+unix://bench@/?socket=$raw/psk.sock&tls-psk-file=$creds/keys.psk"
  [x509]="nbds+unix:///?socket=$raw/x509.sock&tls-certificates=$creds/cli"
)
modes=(plain psk x509)
runs=$raw/runs.tsv
: >"$runs"
for ((r = 0; r < REPEAT; r++)); do
  for ((i = 0; i < ${#modes[@]}; i++)); do
    m=${modes[$(((i + r) % ${#modes[@]}))]}
    server=psk; [[ $m == x509 ]] && server=x509
    running "$server" || continue
    bench_progress "repeat $((r + 1))/$REPEAT: $m"
    c0=$(ticks "${PID[$server]}")
    if ! "$UBCACHE" probe "nbd:${MODE_URI[$m]}" --read-only --only "$WORKLOADS" --seconds "$SECONDS_PER" \
      --json >"$raw/probe-$m-$r.json" 2>"$raw/probe-$m-$r.err"; then
      echo "tls_bench.sh: probe $m failed: $(tail -3 "$raw/probe-$m-$r.err")" >&2
      failures=$((failures + 1))
      continue
    fi
    c1=$(ticks "${PID[$server]}")
    printf '%s\t%s\t%s\t%s\n' "$m" "$r" "$raw/probe-$m-$r.json" "$((c1 - c0))" >>"$runs"
  done
done
stop_server psk
stop_server x509

stamp=$(date -u +%Y%m%d-%H%M%S)
python3 - "$runs" "$OUT/tls-$stamp" "$SECONDS_PER" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
runs, base, seconds, hz = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
vals = {}  # (mode, workload) -> [(IOPS or MB/s, p50 µs)]; (mode, "cpu") -> [server CPU s]
for line in open(runs):
    mode, rep, path, ticks = line.rstrip("\n").split("\t")
    doc = json.load(open(path))
    for r in doc["results"]:
        v = r["iops"] if "4k" in r["name"] else r["mbps"]
        vals.setdefault((mode, r["name"]), []).append((v, r["lat_us"]["p50"]))
    vals.setdefault((mode, "cpu"), []).append(int(ticks) / hz)
workloads = sorted({w for (_, w) in vals if w != "cpu"})
out = {"runs": {f"{m}/{w}": v for (m, w), v in vals.items()}}
lines = ["# NBD over TLS vs plaintext (bench/tls_bench.sh)", "",
         f"`ubcache probe nbd:URI` from mem:1G, {seconds:g} s per workload, medians of "
         f"{len(vals.get(('plain', 'cpu'), []))} runs, interleaved.", "",
         "| workload | plaintext | TLS PSK | ratio | TLS X.509 | ratio |", "|---|---|---|---|---|---|"]
for w in workloads:
    unit = "IOPS" if "4k" in w else "MB/s"
    med = {m: statistics.median(x[0] for x in vals.get((m, w), [(0, 0)])) for m in ("plain", "psk", "x509")}
    p50 = {m: statistics.median(x[1] for x in vals.get((m, w), [(0, 0)])) for m in ("plain", "psk", "x509")}
    ratio = lambda m: med[m] / med["plain"] if med["plain"] else 0
    lines.append(f"| {w} ({unit}; p50 µs) | {med['plain']:.0f} ({p50['plain']:.0f}) | {med['psk']:.0f} ({p50['psk']:.0f}) | "
                 f"{ratio('psk'):.2f}× | {med['x509']:.0f} ({p50['x509']:.0f}) | {ratio('x509'):.2f}× |")
    out[w] = {"median": med, "p50_us": p50, "ratio_psk": ratio("psk"), "ratio_x509": ratio("x509")}
cpu = {m: statistics.median(vals.get((m, "cpu"), [0])) for m in ("plain", "psk", "x509")}
lines += ["", "Server CPU seconds per run (both workloads): " +
          ", ".join(f"{m} {cpu[m]:.2f}" for m in ("plain", "psk", "x509"))]
out["server_cpu_s"] = cpu
open(base + ".json", "w").write(json.dumps(out, indent=1))
open(base + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"\nwritten: {base}.md, {base}.json")
PY
bench_finish
