#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# peers — ubcache against its NBD peers (bench/nbd_peers.sh) and what the
# cache index costs and a warm cache buys (bench/cache_bench.sh), one after
# the other. --quick: 3 s runs, 512 MiB files, two workloads, no *_x2,
# existing files of the right size reused.
set -euo pipefail
. "$(dirname "$0")/common.sh"

pargs=(--file "$WORK/nbd_peers.img" --out "$SUITE_DIR" --ubcache "$UBCACHE")
cargs=(--dir "$WORK" --out "$SUITE_DIR" --ubcache "$UBCACHE")
if [[ $QUICK == 1 ]]; then
  pargs+=(--seconds 3 --size 512M --mem-size 256M --only randread_4k_qd32,seqread_1m_qd8 --x2 none --no-fill)
  cargs+=(--seconds 3 --cache-size 512M --backing-size 512M --ws 256M --ws2 16M --no-fill)
fi
rc=0
bench_progress "nbd_peers.sh ${pargs[*]:6}"
bench_relayed '^== \[' - "$bench/nbd_peers.sh" "${pargs[@]}" || rc=$?
bench_progress "cache_bench.sh ${cargs[*]:6}"
bench_relayed '^== (s1|s2|warmup)' - "$bench/cache_bench.sh" "${cargs[@]}" || rc=$?
p=$(newest "$SUITE_DIR/nbd_peers-*.json")
c=$(newest "$SUITE_DIR/cache_bench-*.json")
"${PYTHON:-python3}" - "$SUITE_DIR/result.json" "$p" "$c" <<'PY'
import json, sys
dst, p, c = sys.argv[1:]
out = {}
for key, f in (("nbd_peers", p), ("cache_bench", c)):
    out[key] = json.load(open(f)) if f else None
json.dump(out, open(dst, "w"), indent=2)
PY
[[ -n $p && -n $c ]] || { echo "peers: a script wrote no JSON" >&2; (( rc )) || rc=1; }
exit "$rc"
