#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# writeback — what writeback buys and what it costs a reader:
# bench/writeback_bench.sh, all sections, its own --quick under --quick
# (5 s runs, 1 pair, 2048 blocks over 16 MiB; existing files of the right
# size reused as they are).
set -euo pipefail
. "$(dirname "$0")/common.sh"

args=(--dir "$WORK" --out "$SUITE_DIR" --ubcache "$UBCACHE")
[[ $QUICK == 1 ]] && args+=(--quick --no-fill)
q=""
[[ $QUICK == 1 ]] && q=" --quick"
bench_progress "writeback_bench.sh$q (files under $WORK)"
rc=0
# Progress: the runs and the fills, not the servers' command lines.
bench_relayed '^== (s[0-9]|filling)' - "$bench/writeback_bench.sh" "${args[@]}" || rc=$?
f=$(newest "$SUITE_DIR/writeback_bench-*.json")
if [[ -n $f ]]; then
  "${PYTHON:-python3}" -c 'import json, sys; json.dump({"writeback_bench": json.load(open(sys.argv[1])), "file": sys.argv[1]}, open(sys.argv[2], "w"), indent=2)' \
    "$f" "$SUITE_DIR/result.json"
elif [[ $rc == 0 ]]; then
  echo "writeback: writeback_bench.sh wrote no JSON" >&2; rc=1
fi
exit "$rc"
