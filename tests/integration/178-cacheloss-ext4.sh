#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 178-cacheloss-ext4 — issue 30 test (c): ext4 under dbench and an fsync
# writer, in writeback with `writeback_order flush` (the default), and the
# cache lost at a random moment. What the backing device alone then holds
# must be what a power cut could have left: after `forget-cache`, e2fsck
# finds it clean once ext4's journal is replayed, and every file whose
# fsync returned before the time the superblock promises is intact.
#
# A cycle: a fresh cache file and backing file (one `ubcache format`, 512
# MiB each), served in writeback over the SAS model (`sas:`), writeback
# running all the time (writeback_delay 0, writeback_percent 0) at a rate
# drawn from CACHELOSS_EXT4_RATES, as a floor (writeback_rate_minimum: the
# rate controller's first update, after 5 s, would slow it down); ext4
# made on the export (nbdfuse + losetup), mounted, and written back (`ctl
# flush`: the device is clean when the load starts). The load: dbench
# (CLIENTS clients, each at a rate drawn from CACHELOSS_EXT4_DBENCH_RATES)
# in one directory, and tests/cacheloss/fsync_writer.py in another — new
# 64 KiB files, each fsynced with its directory, the time each fsync
# returned logged outside the filesystem. Writeback trails the load, so
# 10-70 MiB are dirty after a few seconds. After a random delay the dirty
# data is read (`ctl get dirty_data`), the daemon killed (SIGKILL) and its
# cache file deleted: the cache is lost. The filesystem stack is torn down
# (it sees I/O errors). Then the backing device alone:
#  - show-super, before forget-cache clears them: state, and T =
#    consistent_as_of (unix seconds): in flush order, while dirty, the
#    device holds every write acknowledged before T and of the later ones
#    only what a power cut at some moment at or after T could have left.
#    A dirty device in flush order without such a T fails the test.
#  - `forget-cache --yes` detaches it; its data region (past data_offset)
#    is copied to an image, checked as an admin checks a disk after a power
#    cut: `e2fsck -E journal_only` replays the journal and releases orphan
#    inodes — what the kernel's mount would do, and nothing more: it
#    repairs nothing —, then `e2fsck -fn` (every pass, read-only) must exit
#    0. (A `-fy` first pass would repair the very damage this test looks
#    for, and hide it.)
#  - the image mounted read-only: every file fsynced before T is there with
#    its content (fsync_writer.py check); those fsynced after T may be
#    there or not and are only counted (and each one neither intact nor
#    absent is named: empty, short, zeros where an extent was allocated but
#    not yet written, or other data — the last should never appear).
# The checkers can fail: on a doctored copy of the first image with files
# fsynced before T (two of them: one deleted, one overwritten) the file
# check must name exactly those two, and once a third file's inode is
# cleared (debugfs clri) e2fsck -fn must report errors. The control: one
# cycle in `writeback_order lba` (bcache's address order, issue 30's
# problem), whose fsck and file results are logged, not judged (address
# order may or may not corrupt) — but its superblock must promise nothing
# (consistent_as_of 0). A failed flush-order cycle keeps its backing file
# and logs in /var/tmp/ubcache-178-evidence.* (a real bug).
#
# By hand (from the source tree, as root):
#   UBCACHE=build/ubcache bash tests/integration/178-cacheloss-ext4.sh          # CI: 3 cycles
#   UBCACHE=build/ubcache CACHELOSS_EXT4_CYCLES=20 bash tests/integration/178-cacheloss-ext4.sh
#     (the long form, issue 30's acceptance: 20 cache losses, 20 clean
#     fscks, about 5 minutes; or CACHELOSS_EXT4_CYCLES=20 ctest -R 178)
# Environment (defaults in brackets):
#   CACHELOSS_EXT4_CYCLES   cache losses in flush order [3]
#   CACHELOSS_EXT4_SEED     seed of the rates and kill delays drawn [random, printed]
#   CACHELOSS_EXT4_CLIENTS  dbench clients [4]
#   CACHELOSS_EXT4_DBENCH_RATES  dbench -R (MB/s per client) to draw from ["5 10 20"]
#   CACHELOSS_EXT4_WRITER_RATE   fsync writer's files per second at most [30]
#   CACHELOSS_EXT4_RATES    writeback rates to draw from ["4M 8M 16M"]
#   CACHELOSS_EXT4_KILL_MS  "MIN MAX" kill delay after the load starts, ms ["6000 14000"]
#   CACHELOSS_EXT4_CONTROL=0  skip the lba control cycle
#   CACHELOSS_EXT4_KEEP=1   keep the work dir (images, logs) under /var/tmp
# ctest: label crash
# ctest: label cacheloss
# ctest: cost 90
# ctest: timeout 1200
if [[ ${CACHELOSS_EXT4_KEEP:-0} == 1 ]]; then export UBCACHE_TEST_KEEP=1; fi
source "$(dirname "$0")/lib.sh"

CYCLES=${CACHELOSS_EXT4_CYCLES:-3}
SEED=${CACHELOSS_EXT4_SEED:-$((($(date +%s%N) / 1000) % 1000000))}
CLIENTS=${CACHELOSS_EXT4_CLIENTS:-4}
read -ra DBENCH_RATES <<<"${CACHELOSS_EXT4_DBENCH_RATES:-5 10 20}"
WRITER_RATE=${CACHELOSS_EXT4_WRITER_RATE:-30}
read -ra RATES <<<"${CACHELOSS_EXT4_RATES:-4M 8M 16M}"
read -r KILL_MIN KILL_MAX <<<"${CACHELOSS_EXT4_KILL_MS:-6000 14000}"
CONTROL=${CACHELOSS_EXT4_CONTROL:-1}
SIZE=$((512 << 20))
WRITER=$UBCACHE_SRC/tests/cacheloss/fsync_writer.py
LOADFILE=/usr/share/dbench/client.txt
RANDOM=$SEED
for t in dbench nbdfuse e2fsck debugfs; do command -v "$t" >/dev/null || fail "$t is not installed"; done
[[ -r $LOADFILE ]] || fail "no dbench loadfile at $LOADFILE"

nbdfuse_setup
COPY_MNT=$WORK/copy-mnt
mkdir -p "$COPY_MNT"
DBENCH_PID="" WRITER_PID=""
on_exit 'mountpoint -q "$COPY_MNT" && umount "$COPY_MNT"'
on_exit '[[ -z $DBENCH_PID ]] || kill -KILL -- -"$DBENCH_PID"'
on_exit '[[ -z $WRITER_PID ]] || kill -KILL "$WRITER_PID"'

# Evidence of a failed flush-order cycle, kept out of $WORK (lib.sh drops
# its big files): the backing file as the lost cache left it (superblock
# detached), the replayed copy, the logs.
EVIDENCE=()
keep_evidence() {
  ((${#EVIDENCE[@]})) || return 0
  local dir
  dir=$(mktemp -d /var/tmp/ubcache-178-evidence.XXXXXX)
  cp -a --sparse=always "${EVIDENCE[@]}" "$dir"/
  echo "($TEST_NAME: the failed cycles' devices and logs are kept in $dir)" >&2
}
on_exit keep_evidence

# sb SPEC FIELD — one field of `show-super` ("name value" lines); empty if absent.
sb() { "$UBCACHE" show-super "$1" | awk -v f="$2" '$1 == f {print $2}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
# since A B — A - B in seconds, one decimal.
since() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a - b}'; }

# stop_load CYCLE DIR — dbench (its process group: setsid made it the
# leader) and the writer, which ends by itself at the first I/O error.
stop_load() {
  local k rc=0
  kill -KILL -- -"$DBENCH_PID" 2>/dev/null || true
  wait "$DBENCH_PID" 2>/dev/null || true
  # Its clients too (they hold files open: umount would find ext4 busy).
  for ((k = 0; k < 200; k++)); do kill -0 -- -"$DBENCH_PID" 2>/dev/null || break; sleep 0.05; done
  DBENCH_PID=""
  for ((k = 0; k < 600; k++)); do kill -0 "$WRITER_PID" 2>/dev/null || break; sleep 0.05; done
  ((k < 600)) || fail "$1: the fsync writer did not end within 30 s of the kill: $(cat "$2/writer.log")"
  wait "$WRITER_PID" || rc=$?
  WRITER_PID=""
  ((rc == 0)) || fail "$1: the fsync writer exited $rc: $(tail -n 5 "$2/writer.log")"
}

SELFTEST_DONE=0
# selftest DIR IMG T — the checkers bite, on a copy of IMG (replayed and
# clean, its files checked): two files fsynced before T and found intact,
# one deleted and one overwritten, must fail the check, named both and
# nothing else; with a third file's inode cleared, e2fsck -fn must report
# errors. Skipped (for a later cycle) with fewer than two such files.
selftest() {
  local dir=$1 img=$2 t=$3 doc=$1/doctored.img out rc=0
  local -a early all
  mapfile -t early < <(awk -v t="$t" '$5 < t {print $2}' "$dir/ok.list")
  mapfile -t all < <(awk -v t="$t" '$5 >= t {print $2}' "$dir/ok.list")
  ((${#early[@]} >= 2)) || return 0
  local gone=${early[0]} changed=${early[-1]} cleared=${all[0]:-${early[1]}}
  [[ $cleared != "$changed" ]] || return 0
  cp --sparse=always "$img" "$doc"
  mount -t ext4 -o loop "$doc" "$COPY_MNT" || fail "self-check: mounting the doctored copy"
  rm "$COPY_MNT/fsync/$gone"
  dd if=/dev/urandom of="$COPY_MNT/fsync/$changed" bs=4k count=1 seek=3 conv=notrunc status=none
  umount "$COPY_MNT"
  mount -t ext4 -o ro,noload,loop "$doc" "$COPY_MNT" || fail "self-check: mounting the doctored copy read-only"
  out=$(python3 "$WRITER" check --log "$dir/fsync.log" --root "$COPY_MNT/fsync" --before "$t" 2>&1) || rc=$?
  umount "$COPY_MNT"
  ((rc == 1)) && [[ $(grep -c '^BROKEN: ' <<<"$out") == 2 ]] &&
    grep -q "^BROKEN: $gone: .*absent" <<<"$out" && grep -q "^BROKEN: $changed: .*1 of 16 blocks other" <<<"$out" ||
    fail "self-check: the file check should name $gone (deleted) and $changed (overwritten), and exit 1; exit $rc:
$out"
  debugfs -w -R "clri fsync/$cleared" "$doc" >"$dir/debugfs.log" 2>&1 || fail "self-check: debugfs clri: $(cat "$dir/debugfs.log")"
  rc=0
  e2fsck -fn "$doc" >"$dir/fsck-doctored.log" 2>&1 || rc=$?
  ((rc >= 4)) || fail "self-check: e2fsck -fn passed a filesystem with a cleared inode (exit $rc): $(cat "$dir/fsck-doctored.log")"
  rm -f "$doc"
  SELFTEST_DONE=1
  log "self-check: the file check names the deleted and the overwritten file (both fsynced before T);" \
    "e2fsck -fn exits $rc once an inode is cleared"
}

SUMMARY=() FLUSH_BEFORE_T=0 SUSPENDED=0
# cycle I ORDER — one cache loss in writeback_order ORDER (flush; lba for the control).
cycle() {
  local i=$1 order=$2 dir=$WORK/c$1
  mkdir -p "$dir"
  local cache=$dir/cache.img backing=$dir/backing.img img=$dir/region.img
  truncate -s "$SIZE" "$cache" "$backing"
  "$UBCACHE" format --cache "$cache" --backing "$backing" >"$dir/format.log" 2>&1 ||
    fail "cycle $i: format: $(cat "$dir/format.log")"
  # Drawn here, not in $(...): a subshell's RANDOM is seeded anew. The lba
  # control takes the slowest writeback, the heaviest load and the longest
  # delay: the most dirty data, its best chance to show what address order
  # does.
  local wbrate=${RATES[$((RANDOM % ${#RATES[@]}))]} dbrate=${DBENCH_RATES[$((RANDOM % ${#DBENCH_RATES[@]}))]}
  local delay=$((KILL_MIN + (RANDOM * 32768 + RANDOM) % (KILL_MAX - KILL_MIN + 1)))
  [[ $order == flush ]] || wbrate=${RATES[0]} dbrate=${DBENCH_RATES[-1]} delay=$KILL_MAX
  start_server --cache "$cache" --backing "sas:$backing" --cache-mode writeback --nbd "unix:$SOCK" \
    --control "$CTL_SOCK" --sequential-cutoff 0 --congested-read-threshold-us 0 --congested-write-threshold-us 0 \
    --set writeback_delay=0 --set writeback_percent=0 --set writeback_rate="$wbrate" \
    --set writeback_rate_minimum="$wbrate" --set writeback_order="$order"
  [[ $(sb "$backing" writeback_order) == "$order" ]] ||
    fail "cycle $i: the superblock says writeback_order $(sb "$backing" writeback_order), want $order"
  local off
  off=$(sb "$backing" data_offset)
  attach $((SIZE - off)) direct
  mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$LOOP" >"$dir/mkfs.log" 2>&1 ||
    fail "cycle $i: mkfs.ext4: $(cat "$dir/mkfs.log")"
  mount -t ext4 "$LOOP" "$MNT" || fail "cycle $i: mount"
  mkdir "$MNT/dbench" "$MNT/fsync"
  # mkfs's tables and journal written back first: the cycle starts clean,
  # and the device turns dirty (dirty_since) with the load.
  sync -f "$MNT"
  timeout 120 "$UBCACHE" ctl --control "$CTL_SOCK" flush >"$dir/flush.log" 2>&1 ||
    fail "cycle $i: ctl flush after mkfs: $(cat "$dir/flush.log")"
  [[ $(sb "$backing" state) == clean ]] || fail "cycle $i: state $(sb "$backing" state) after ctl flush, want clean"
  setsid dbench -D "$MNT/dbench" -t 3600 -R "$dbrate" -c "$LOADFILE" "$CLIENTS" >"$dir/dbench.log" 2>&1 &
  DBENCH_PID=$!
  python3 "$WRITER" write --dir "$MNT/fsync" --log "$dir/fsync.log" --ready "$dir/ready" --rate "$WRITER_RATE" \
    --seed $((SEED * 100 + i)) >"$dir/writer.log" 2>&1 &
  WRITER_PID=$!
  local k
  for ((k = 0; k < 200; k++)); do [[ -e $dir/ready ]] && break; sleep 0.05; done
  [[ -e $dir/ready ]] || fail "cycle $i: the fsync writer did not start: $(cat "$dir/writer.log")"
  [[ $(ps -o pgid= -p "$DBENCH_PID" | tr -d ' ') == "$DBENCH_PID" ]] ||
    fail "cycle $i: dbench ($DBENCH_PID) does not lead its own process group: stop_load could not end its clients"

  # Until the kill, once a second ($dir/samples): seconds since the load
  # started, the time, dirty bytes, state, consistent_as_of, files fsynced,
  # bytes written back.
  local t0=$EPOCHREALTIME end left
  end=$(awk -v a="$t0" -v d="$delay" 'BEGIN {printf "%.3f", a + d / 1000}')
  while :; do
    left=$(awk -v a="$EPOCHREALTIME" -v b="$end" 'BEGIN {x = b - a; printf "%.3f", (x > 1 ? 1 : x)}')
    [[ $left == -* || $left == 0.000 ]] && break
    sleep "$left"
    echo "$(since "$EPOCHREALTIME" "$t0") $EPOCHREALTIME $(ctl get dirty_data 2>/dev/null) $(sb "$backing" state)" \
      "$(sb "$backing" consistent_as_of) $(wc -l <"$dir/fsync.log") $(ctl get writeback_written 2>/dev/null)" >>"$dir/samples"
  done

  local dirty t_kill
  dirty=$(ctl get dirty_data) || fail "cycle $i: ctl get dirty_data"
  server_alive "cycle $i, before the kill"
  kill -0 "$WRITER_PID" 2>/dev/null || fail "cycle $i: the fsync writer stopped before the kill: $(cat "$dir/writer.log")"
  kill -0 "$DBENCH_PID" 2>/dev/null || fail "cycle $i: dbench stopped before the kill: $(tail -n 5 "$dir/dbench.log")"
  t_kill=$EPOCHREALTIME
  kill -KILL "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  rm -f "$cache"
  stop_load "cycle $i" "$dir"
  detach

  # The backing device alone, from here on.
  "$UBCACHE" show-super "$backing" >"$dir/super.txt" 2>&1 || fail "cycle $i: show-super: $(cat "$dir/super.txt")"
  local state t t_utc before lag=-
  state=$(sb "$backing" state)
  t=$(sb "$backing" consistent_as_of)
  t_utc=$(awk '$1 == "consistent_as_of_utc" {$1 = ""; print substr($0, 2)}' "$dir/super.txt")
  [[ $t =~ ^[0-9]+$ ]] || fail "cycle $i: show-super prints no consistent_as_of (a number): $(cat "$dir/super.txt")"
  # Rule 17: a cache full of dirty epochs may have suspended flush order
  # (the log says so): then no time may be promised, and the cycle is only
  # logged, as the lba control is.
  local suspended=0
  [[ $order == flush ]] && grep -q "writeback order suspended" "$SERVER_LOG" && suspended=1
  if [[ $order == lba ]]; then
    ((t == 0)) || fail "cycle $i (lba): consistent_as_of $t ($t_utc), want 0: address order promises nothing"
    before=0
  elif ((suspended)); then
    ((t == 0)) || fail "cycle $i: flush order was suspended for a full cache (rule 17), yet consistent_as_of is $t ($t_utc)"
    before=0 SUSPENDED=$((SUSPENDED + 1))
  elif [[ $state == dirty ]]; then
    ((t > 0)) || fail "cycle $i: the device is dirty in flush order, yet consistent_as_of is 0 (no promise)"
    before=$t lag=$(since "$t_kill" "$t")
  else
    # Nothing dirty at the kill: every write acknowledged before it is there.
    before=$t_kill lag=0
  fi
  "$UBCACHE" forget-cache --yes "$backing" >"$dir/forget.log" 2>&1 ||
    fail "cycle $i: forget-cache --yes: $(cat "$dir/forget.log")"
  [[ $(sb "$backing" state) == none ]] || fail "cycle $i: state $(sb "$backing" state) after forget-cache --yes"
  if ((suspended)) && [[ $state == dirty ]]; then
    grep -q "fsck before mounting" "$dir/forget.log" ||
      fail "cycle $i: the order was suspended, yet forget-cache does not ask for fsck: $(cat "$dir/forget.log")"
  fi
  dd if="$backing" of="$img" bs=1M iflag=skip_bytes skip="$off" conv=sparse status=none
  [[ $(stat -c %s "$img") == $((SIZE - off)) ]] || fail "cycle $i: the copy of the data region is $(stat -c %s "$img") bytes"

  local rrc=0 frc=0 fsck
  e2fsck -y -E journal_only "$img" >"$dir/fsck-replay.log" 2>&1 || rrc=$?
  e2fsck -fn "$img" >"$dir/fsck.log" 2>&1 || frc=$?
  if ((frc == 0 && rrc <= 1)); then
    fsck="e2fsck clean (journal replay exit $rrc)"
  else
    fsck="E2FSCK NOT CLEAN (journal replay exit $rrc, e2fsck -fn exit $frc)"
  fi

  local crc=0 check
  if mount -t ext4 -o ro,noload,loop "$img" "$COPY_MNT" 2>"$dir/mount.log"; then
    python3 "$WRITER" check --log "$dir/fsync.log" --root "$COPY_MNT/fsync" --before "$before" \
      --ok-list "$dir/ok.list" >"$dir/check.log" 2>&1 || crc=$?
    umount "$COPY_MNT"
    ((crc <= 1)) || fail "cycle $i: fsync_writer.py check failed: $(cat "$dir/check.log")"
    check=$(head -n 1 "$dir/check.log")
    check=${check#check: }
  else
    crc=1 check="THE COPY DOES NOT MOUNT: $(head -n 1 "$dir/mount.log")"
    echo "BROKEN: $check" >"$dir/check.log"
  fi

  local what="state $state, consistent_as_of $t ($t_utc), $lag s before the kill"
  [[ $order == flush ]] || what="state $state, consistent_as_of $t"
  ((suspended)) && what="state $state, consistent_as_of $t: flush order suspended (rule 17)"
  log "cycle $i ($order): dbench $CLIENTS x $dbrate MB/s, writeback_rate $wbrate, killed after $delay ms" \
    "with $(mib "$dirty") MiB dirty; $what | $(sed 's/^fsync_writer: //; s/, fsyncs returned.*;/;/' "$dir/writer.log")" \
    "| $check | $fsck"
  grep -q '^NOTE: ' "$dir/check.log" && log "  files fsynced after T, neither intact nor absent (allowed):
$(grep '^NOTE: ' "$dir/check.log" | head -n 10)"
  log "  per second (s: dirty MiB, written back MiB, T behind by s): $(awk '{printf "%s: %.0f %.0f %s, ", $1,
    $3 / 1048576, $7 / 1048576, ($5 > 0 ? sprintf("%.1f", $2 - $5) : "-")}' "$dir/samples")"
  [[ $order == flush ]] && what="T $lag s before the kill" || what="no T"
  ((suspended)) && what="no T (suspended)"
  SUMMARY+=("cycle $i ($order): $(mib "$dirty") MiB dirty, $what; $check; $fsck")

  if [[ $order == lba ]] || ((suspended)); then
    ((frc == 0 && rrc <= 1)) || log "  $order$( ((suspended)) && echo ' (suspended)'), e2fsck -fn says: $(grep -vE '^(Pass [0-9]|e2fsck [0-9])' "$dir/fsck.log" |
      grep . | head -n 6 | tr '\n' ' ')"
  else
    FLUSH_BEFORE_T=$((FLUSH_BEFORE_T + $(grep -oE 'fsynced before T: [0-9]+' <<<"$check" | grep -oE '[0-9]+$')))
    local bad=0
    if ((frc != 0 || rrc > 1)); then
      bad=1
      soft_fail "cycle $i: the backing device alone is not clean after its journal replay (flush order: a power cut could not have left it); e2fsck -E journal_only exit $rrc, e2fsck -fn exit $frc:
$(cat "$dir/fsck-replay.log" "$dir/fsck.log")"
    fi
    if ((crc != 0)); then
      bad=1
      soft_fail "cycle $i: $(grep -c '^BROKEN: ' "$dir/check.log") files fsynced before consistent_as_of $t ($t_utc) are missing or damaged (all in $dir/check.log):
$(grep -v '^NOTE: ' "$dir/check.log" | head -n 8)"
    fi
    if ((bad)); then
      EVIDENCE+=("$dir" "$SERVER_LOG")
      return 0
    fi
    ((SELFTEST_DONE)) || selftest "$dir" "$img" "$before"
  fi
  [[ -n ${UBCACHE_TEST_KEEP:-} ]] || rm -f "$img" "$backing"
}

log "seed $SEED; $CYCLES cycles in flush order$( ((CONTROL)) && echo ', then one in lba'); dbench $CLIENTS clients" \
  "at ${DBENCH_RATES[*]} MB/s each + an fsync writer at $WRITER_RATE files/s; writeback rates ${RATES[*]};" \
  "kill after $KILL_MIN..$KILL_MAX ms"
for ((c = 1; c <= CYCLES; c++)); do
  cycle "$c" flush
done
if ((CONTROL)); then
  cycle 0 lba
fi
for s in "${SUMMARY[@]}"; do log "summary: $s"; done
((SUSPENDED < CYCLES)) || fail "flush order was suspended (a full cache, rule 17) in every cycle: the promise was never tested"
soft_fail_report
((FLUSH_BEFORE_T > 0)) || fail "no file was fsynced before consistent_as_of in any cycle: the promise was never tested"
((SELFTEST_DONE)) || fail "the self-check on a doctored copy never ran (no cycle had two intact files fsynced before T)"
log "ok: $CYCLES cache losses in flush order, $CYCLES clean fscks, all $FLUSH_BEFORE_T files fsynced before" \
  "consistent_as_of intact; run time $SECONDS s"
