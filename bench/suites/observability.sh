#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# observability — does reading statistics stall I/O? bench/ctl_stall.sh
# (issue 5's stall test): 4 KiB randread QD32 through NBD without and with
# ctl_poller asking priority-stats, stats and metrics 100 times a second:
# one run polled in every other second (the verdict), and separate runs
# alternated. --quick: a 30 s alternating run and the short form test 113
# runs (4 pairs of 3 s over a 256 MiB working set); otherwise ctl_stall.sh's
# defaults (120 s; 12 pairs of 5 s; 1 GiB).
set -euo pipefail
. "$(dirname "$0")/common.sh"

[[ -x $POLLER ]] || { echo "observability: $POLLER is not built (target ctl_poller)" >&2; exit 2; }
if [[ $QUICK == 1 ]]; then
  export RUNTIME=${RUNTIME:-3} REPEAT=${REPEAT:-4} WS=${WS:-256M} ALT_SECONDS=${ALT_SECONDS:-30}
fi
export DIR=$WORK/ctl_stall
bench_progress "ctl_stall.sh: ${ALT_SECONDS:-120} s polled in every other second, ${REPEAT:-12} pairs of ${RUNTIME:-5} s without/with polling, working set ${WS:-1G}"
rc=0
bench_relayed '^ctl_stall: ' "$SUITE_DIR/ctl_stall.json" "$bench/ctl_stall.sh" || rc=$?
if [[ $rc == 0 ]]; then
  "${PYTHON:-python3}" - "$SUITE_DIR/ctl_stall.json" "$SUITE_DIR/result.json" "${RUNTIME:-5}" "${REPEAT:-12}" "${WS:-1G}" "${RATE:-100}" "${ALT_SECONDS:-120}" <<'PY'
import json, sys
src, dst, runtime, repeat, ws, rate, alt = sys.argv[1:]
d = json.load(open(src))
json.dump({"ctl_stall": d, "config": {"runtime_s": int(runtime), "repeat": int(repeat), "ws": ws, "rate": int(rate), "alt_seconds": int(alt),
           "command": "bench/ctl_stall.sh"}}, open(dst, "w"), indent=2)
PY
fi
exit "$rc"
