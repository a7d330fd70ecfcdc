# shellcheck shell=bash
# bench/suites/common.sh — sourced by every suite (after set -euo pipefail).
#
# A suite is one executable script, bench/suites/NAME.sh, run by bench/run
# in its own session (so bench/run can stop every process it left) with
# stdout and stderr going to logs/NAME.log. Its environment:
#   SUITE_DIR  where it writes result.json (the data summary.py renders)
#              and any raw files it keeps (fio JSON, the scripts' .json/.md)
#   UBCACHE    the ubcache binary under test; POLLER: bench/ctl_poller
#   QUICK      1 under bench/run --quick: short runs, small files
#   WORK       where device files go (the local disk: O_DIRECT, not tmpfs)
#   RUN_*      progress (see bench/lib.sh, bench_progress)
# Exit status: 0 measured, 3 not implemented yet, anything else failed.
# Run alone (bench/suites/NAME.sh) it takes the defaults below.
suites=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bench=$(cd "$suites/.." && pwd)
repo=$(cd "$bench/.." && pwd)
. "$bench/lib.sh"

SUITE=$(basename "$0" .sh)
QUICK=${QUICK:-0}
UBCACHE=${UBCACHE:-$repo/build/ubcache}
POLLER=${POLLER:-$(dirname "$UBCACHE")/bench/ctl_poller}
WORK=${WORK:-/var/tmp/ubcache-bench/run}
SUITE_DIR=${SUITE_DIR:-$bench/results/$SUITE-$(date +%Y%m%d-%H%M%S)}
export UBCACHE POLLER
mkdir -p "$SUITE_DIR" "$WORK"
[[ -x $UBCACHE ]] || { echo "$SUITE: $UBCACHE is not an executable" >&2; exit 2; }
[[ $WORK == /tmp || $WORK == /tmp/* ]] && echo "$SUITE: warning: $WORK is under /tmp, which may be tmpfs (no O_DIRECT)" >&2

# suite_not_implemented WHAT: records that the suite does not exist yet (no
# numbers) and exits 3.
suite_not_implemented() {
  echo "$SUITE: not yet implemented: $*" >&2
  "${PYTHON:-python3}" -c 'import json, sys; json.dump({"not_implemented": True, "plan": sys.argv[2]}, open(sys.argv[1], "w"), indent=2)' \
    "$SUITE_DIR/result.json" "$*"
  exit 3
}

# newest GLOB: the newest file matching GLOB, or nothing.
newest() {
  local f
  f=$(ls -t $1 2>/dev/null | head -1) || true
  [[ -n $f ]] && echo "$f"
  return 0
}
