#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fairness — the mmtests thread's question: does one random reader starve
# beside heavy writers? 4 writers (4 KiB randwrite QD8 each, a FLUSH after
# every write) and 1 reader (4 KiB randread QD1 over a region not cached, so
# its reads go to the spindle), against the same reader alone; in
# writethrough (every write reaches the spindle) and in writeback with
# writeback running (writeback_percent 1). bench/writeback_bench.sh's
# section (3a) with --writer-fsync 1, once per mode; --quick: 1 pair of 5 s
# reader windows per mode, else 2 pairs of 10 s.
set -euo pipefail
. "$(dirname "$0")/common.sh"

rc=0
for mode in writethrough writeback; do
  args=(--dir "$WORK" --out "$SUITE_DIR/$mode" --ubcache "$UBCACHE" --sections 3a --writer-fsync 1 --mode3 "$mode")
  [[ $QUICK == 1 ]] && args+=(--quick --no-fill)
  mkdir -p "$SUITE_DIR/$mode"
  bench_progress "$mode: reader beside 4 syncing writers vs alone"
  bench_relayed '^== (s[0-9]|filling)' - "$bench/writeback_bench.sh" "${args[@]}" || rc=$?
done
"${PYTHON:-python3}" - "$SUITE_DIR" <<'PY' || rc=1
import glob, json, os, sys
d = sys.argv[1]
out = {}
for mode in ("writethrough", "writeback"):
    files = sorted(glob.glob(os.path.join(d, mode, "writeback_bench-*.json")), key=os.path.getmtime)
    if files:
        out[mode] = json.load(open(files[-1]))
if not out:
    sys.exit("fairness: writeback_bench.sh wrote no JSON")
json.dump(out, open(os.path.join(d, "result.json"), "w"), indent=2)
PY
exit "$rc"
