#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 175-epoch-check — the checker of the cache-loss harness (issue 30 item 6)
# keeps working while ordered writeback does not exist yet (the harness,
# tests/cacheloss/run.sh, is not in ctest until it does):
#  1. epoch_check.py selftest: hand-made histories that must pass and must
#     fail, and a model daemon checked at every step (epoch order always
#     passes, address order is caught);
#  2. real clients: tests/cacheloss/stamp_writer.py (4 NBD connections,
#     stamped writes, FLUSHes, FUA) against nbdkit's file plugin (a server
#     nobody here wrote; its writes are in the page cache when acknowledged),
#     nbdkit killed with SIGKILL after 1 s: the file is consistent with E =
#     every barrier of the history;
#  3. the same file doctored as address-order writeback leaves it (the
#     block holding the oldest write zeroed, newer ones kept): a violation
#     naming that block; a torn block: a violation.
source "$(dirname "$0")/lib.sh"
CHECK=$INTEGRATION_DIR/epoch_check.py
WRITER=$UBCACHE_SRC/tests/cacheloss/stamp_writer.py
BLOCKS=2048

python3 "$CHECK" selftest >"$WORK/selftest.log" 2>&1 || fail "selftest: $(cat "$WORK/selftest.log")"
grep -q '^selftest: all ok$' "$WORK/selftest.log" || fail "selftest: no 'all ok': $(cat "$WORK/selftest.log")"
log "1: $(grep -c '^selftest: ok' "$WORK/selftest.log") selftest cases ok"

# ---- 2: a real history, a server that keeps everything ----
img=$WORK/ref.img rsock=$WORK/ref.sock
truncate -s $((BLOCKS * 4096)) "$img"
nbdkit -f -U "$rsock" file "$img" 2>"$WORK/nbdkit.log" &
REF_PID=$!
on_exit 'kill -KILL "$REF_PID"'
for _ in $(seq 200); do [[ -S $rsock ]] && break; sleep 0.05; done
[[ -S $rsock ]] || fail "2: nbdkit did not start: $(cat "$WORK/nbdkit.log")"
python3 "$WRITER" "nbd+unix:///?socket=$rsock" --log "$WORK/history" --blocks $BLOCKS --writers 4 --rate 3000 \
  --ready "$WORK/ready" >"$WORK/writer.log" 2>&1 &
WPID=$!
for _ in $(seq 200); do [[ -e $WORK/ready ]] && break; sleep 0.05; done
sleep 1
kill -KILL "$REF_PID"
wait "$REF_PID" 2>/dev/null || true
wait "$WPID" || fail "2: the writer exited $?: $(cat "$WORK/writer.log")"
log "2: $(cat "$WORK/writer.log")"
grep -q '^D ' "$WORK/history" || fail "2: no FLUSH completed in 1 s"
rc=0
python3 "$CHECK" check --log "$WORK/history" --image "$img" --blocks $BLOCKS >"$WORK/check.log" 2>&1 || rc=$?
((rc == 0)) || fail "2: nbdkit's file after kill -9 (exit $rc): $(cat "$WORK/check.log")"
# A FUA write still in flight at the kill is a barrier of the history that
# never completed and may not be in the file: E reaches every completed one.
read -r e m c < <(grep -oE 'E = [0-9]+ of [0-9]+ barriers \([0-9]+ completed' "$WORK/check.log" |
  tr -d '(' | awk '{print $3, $5, $7}')
[[ -n $c ]] || fail "2: no 'E = … of … barriers (… completed' in the report: $(cat "$WORK/check.log")"
((c >= m - 1 && e >= c)) ||
  fail "2: every completed barrier is in a file nbdkit kept, yet E = $e of $m ($c completed)"
log "2: $(head -n 1 "$WORK/check.log")"

# ---- 3: doctored: the oldest write lost, as address-order writeback loses it ----
oldest=$(python3 - "$img" $BLOCKS "$INTEGRATION_DIR" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
from epoch_check import BLOCK, parse_block
best = None
with open(sys.argv[1], "rb") as f:
    for b in range(int(sys.argv[2])):
        st = parse_block(f.read(BLOCK))
        if st and (best is None or st[3] < best[1]):
            best = (b, st[3])
print(best[0])
EOF
)
cp "$img" "$WORK/lost.img"
dd if=/dev/zero of="$WORK/lost.img" bs=4k seek="$oldest" count=1 conv=notrunc status=none
rc=0
python3 "$CHECK" check --log "$WORK/history" --image "$WORK/lost.img" --blocks $BLOCKS >"$WORK/lost.log" 2>&1 || rc=$?
((rc == 1)) && grep -q "block $oldest still holds zeros" "$WORK/lost.log" ||
  fail "3: block $oldest zeroed, newer blocks kept: exit $rc, $(cat "$WORK/lost.log")"
log "3: $(head -n 1 "$WORK/lost.log")"
cp "$img" "$WORK/torn.img"
dd if=/dev/urandom of="$WORK/torn.img" bs=1 seek=$((oldest * 4096 + 2048)) count=16 conv=notrunc status=none
rc=0
python3 "$CHECK" check --log "$WORK/history" --image "$WORK/torn.img" --blocks $BLOCKS >"$WORK/torn.log" 2>&1 || rc=$?
((rc == 1)) && grep -q "block $oldest: .*(torn)" "$WORK/torn.log" || fail "3: a torn block: exit $rc, $(cat "$WORK/torn.log")"
log "ok: epoch_check"
