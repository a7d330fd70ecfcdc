#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 155-rbd-takeover — issue 30 (d): a Ceph image taken over from a host that
# died, or was fenced, with dirty data in its writeback cache is stale but
# consistent in `writeback_order flush`, never corrupt. Against a one-node
# Ceph cluster (tests/ceph/cluster.sh). Host A is `serve --cache --backing
# rbd:… --cache-mode writeback` under client.admin, with ext4 on its export
# (nbdfuse + losetup): mkfs and a few files, all written back (`ctl flush`),
# then dbench and a writer of fsynced files (each one's fsync time logged)
# until tens of MiB are dirty, writeback running beside them. Host B is
# another cephx client (client.hostb, `profile rbd`, as in 150).
#  1. A dead host: A is killed (SIGKILL) mid-workload and its cache is
#     gone. B follows doc/ceph.md "A dead host": `rbd lock ls` and `rbd
#     lock rm` (A is then blocklisted), `ubcache forget-cache` (a report,
#     nothing changed) and `forget-cache --yes` (detached), having read
#     consistent_as_of T (show-super) before; the report names T.
#     `rbd export` of the image, past data_offset (8 KiB): the journal
#     replayed (e2fsck -E journal_only, as a mount would), `e2fsck -fn`
#     exits 0, every file whose fsync returned before T reads back intact,
#     and the writer's files are what a power cut leaves (a prefix of them
#     intact, then at most one in part, none after). Controls: the same
#     copy with a block of such a file zeroed fails the file check, and
#     with the writer's directory block zeroed fails e2fsck. B then serves
#     the image alone, mounts it and finds the same files.
#  2. A fenced host that is alive: B breaks A's lock mid-workload; A is
#     fenced, and nothing more reaches the image (rbd export right after
#     the fence and after A stopped are identical, superblock included);
#     A's restart with its cache and `--after-fence discard` drops the
#     dirty data and leaves the image's data as the fence left it, and that
#     image (T read before the restart), journal replayed, passes the same
#     checks. (151 checks the fence itself with patterns; this adds a
#     filesystem and its consistency.)
# These are filesystem-level checks: they catch a corrupt take-over, but
# an order violation only when it shows in ext4 (with writeback_order lba
# forced, 7 runs by hand all passed them); the block-level check of the
# order is 175/177's epoch_check.
# A failed fsck keeps the copy, the logs and the dead cache in
# /var/tmp/ubcache-155-evidence.* (a real bug in flush order).
# T155_SECONDS (default 8): how long each workload runs before the kill.
# ctest: cost 60
source "$(dirname "$0")/lib.sh"
for t in dbench nbdfuse e2fsck debugfs; do command -v $t >/dev/null || fail "$t is not installed"; done

CEPH=$WORK/ceph
CONF=$("$UBCACHE_SRC/tests/ceph/cluster.sh" start "$CEPH") || fail "the Ceph cluster did not start"
on_exit "'$UBCACHE_SRC/tests/ceph/cluster.sh' stop '$CEPH'"
nbdfuse_setup
M=$((1 << 20))
SIZE=$((256 * M))
SECS=${T155_SECONDS:-8}
MIN_DIRTY=$((8 * M))

# Host A: client.admin. Host B: its own cephx client, as another host's.
ceph -c "$CONF" auth get-or-create client.hostb mon 'profile rbd' osd 'profile rbd pool=rbd' \
  -o "$CEPH/hostb.keyring" >/dev/null || fail "ceph auth get-or-create client.hostb"
rbd_a() { rbd -c "$CONF" "$@"; }
rbd_b() { rbd -c "$CONF" --id hostb --keyring "$CEPH/hostb.keyring" "$@"; }
spec_a() { echo "rbd,conf=$CONF:rbd/$1"; }
spec_b() { echo "rbd,conf=$CONF,id=hostb,keyring=$CEPH/hostb.keyring:rbd/$1"; }
sb() { "$UBCACHE" show-super "$1" | awk -v f="$2" '$1 == f {print $2}'; }
sb_bytes() { { rbd_b export --no-progress "rbd/$1" - 2>/dev/null || true; } | head -c 8192 | sha256sum; }

# Evidence of a failed fsck, kept out of $WORK (lib.sh drops its big files):
# the copy (replayed), the export it came from (as found), the cache whose
# dirty data it lacks, and the logs.
EVIDENCE=()
LOST_CACHE=
keep_evidence() {
  ((${#EVIDENCE[@]})) || return 0
  local dir
  dir=$(mktemp -d /var/tmp/ubcache-155-evidence.XXXXXX)
  cp -a "${EVIDENCE[@]}" "$WORK"/*.full "$WORK"/*.log "$WORK"/*.out "$WORK"/*.files "$WORK"/*.sums "$dir"/ 2>/dev/null
  "$UBCACHE" --version >"$dir/version" 2>&1
  echo "($TEST_NAME: the failed image and its logs are kept in $dir)" >&2
}
on_exit keep_evidence

# The writer: files of random data, each fsynced with its directory, one
# "name size sha256 time" line per file once both fsyncs returned.
cat >"$WORK/writer.py" <<'EOF'
import hashlib, os, random, sys, time
d, logp = sys.argv[1], sys.argv[2]
rnd = random.Random(155)
os.makedirs(d, exist_ok=True)
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
with open(logp, "w", buffering=1) as log:
    for i in range(1, 1 << 30):
        while os.statvfs(d).f_bavail * os.statvfs(d).f_frsize < (64 << 20):
            time.sleep(0.1)  # a fast machine: keep ext4 from filling up
        n = rnd.choice([4096, 12345, 65536, 131072, 262144])
        data = os.urandom(n)
        name = f"f{i:05d}"
        try:
            fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.close(fd)
            os.fsync(dfd)
        except OSError as e:
            print(f"writer: stopped at {name}: {e}", file=sys.stderr)
            break
        log.write(f"{name} {n} {hashlib.sha256(data).hexdigest()} {time.time():.6f}\n")
EOF

# The files on a mounted copy (MNT T FILES SEEDSUMS KFILE): the seed files
# and every file the writer saw fsynced before T intact, and the writer's
# files what a power cut leaves: a prefix of them intact (each was made only
# after the one before was fsynced), then perhaps one more in part, and
# none after. Writes how many are intact to KFILE.
cat >"$WORK/check_files.py" <<'EOF'
import hashlib, os, sys
mnt, t, files, seed, kfile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def sha(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
bad = []
for line in open(seed):
    h, name = line.split()
    p = os.path.join(mnt, "seed", name)
    if not os.path.exists(p) or sha(p) != h:
        bad.append(f"seed/{name}")
files = [l.split() for l in open(files)]
state = []  # per file, in the writer's order: "intact", "absent" or "damaged"
for name, n, h, when in files:
    p = os.path.join(mnt, "w", name)
    if not os.path.exists(p):
        state.append("absent")
    elif os.path.getsize(p) == int(n) and sha(p) == h:
        state.append("intact")
    else:
        state.append("damaged")
k = next((i for i, s in enumerate(state) if s != "intact"), len(state))
for i in range(k + 1, len(state)):
    if state[i] != "absent":
        bad.append(f"w/{files[i][0]} is {state[i]} but w/{files[k][0]}, fsynced before it was made, is {state[k]}")
before = [i for i, f in enumerate(files) if float(f[3]) < t]
for i in before:
    if state[i] != "intact":
        bad.append(f"w/{files[i][0]} (fsynced at {files[i][3]}, before T {t}) is {state[i]}")
tk = float(files[k - 1][3]) if k else None
print(f"{sum(state[i] == 'intact' for i in before)}/{len(before)} files fsynced before T intact; the first {k} of {len(files)} intact"
      + (f" (the last fsynced {tk - t:+.1f} s from T)" if k else "")
      + (f", then w/{files[k][0]} {state[k]}" if k < len(state) else "")
      + f"; {state.count('absent')} absent, {state.count('damaged')} damaged")
open(kfile, "w").write(f"{k}\n")
for b in bad[:20]:
    print("BAD " + b)
sys.exit(1 if bad else 0)
EOF

# Host A: image $1 (SIZE) formatted with cache $2, served in writeback;
# ext4 on its export with files in seed/ (sums in $WORK/seed.sums), all
# written back; then dbench and the writer run (pids WRITER_PID,
# DBENCH_PID; the writer's log $WORK/$1.files) for SECS seconds.
host_a() {
  local img=$1 cache=$2
  rbd_a create "rbd/$img" --size $((SIZE / M))M || fail "rbd create rbd/$img"
  truncate -s 256M "$cache"
  "$UBCACHE" format --cache "$cache" --backing "$(spec_a "$img")" --label "$img" >"$WORK/format.$img.log" 2>&1 ||
    fail "$img: format: $(cat "$WORK/format.$img.log")"
  # Writeback at 4 MiB/s at least, running all along: it trails the
  # workload, tens of MiB stay dirty, and the kill finds it in an epoch.
  start_server --cache "$cache" --backing "$(spec_a "$img")" --cache-mode writeback --nbd "unix:$SOCK" \
    --control "$CTL_SOCK" --set writeback_rate_minimum=4M
  [[ $(ctl get writeback_order) == flush ]] || fail "$img: writeback_order $(ctl get writeback_order), want flush (the default)"
  attach $((SIZE - 8192))
  mkfs.ext4 -q -F -b 4096 -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$LOOP" >"$WORK/mkfs.log" 2>&1 ||
    fail "$img: mkfs.ext4: $(cat "$WORK/mkfs.log")"
  mount -t ext4 "$LOOP" "$MNT" || fail "$img: mount"
  mkdir -p "$MNT/seed" "$MNT/db"
  for s in 4096 65536 1048576 3000000; do head -c $s /dev/urandom >"$MNT/seed/s$s"; done
  (cd "$MNT/seed" && sha256sum s*) >"$WORK/seed.sums"
  sync -f "$MNT"
  timeout 120 "$UBCACHE" ctl --control "$CTL_SOCK" flush >"$WORK/flush.out" 2>&1 || fail "$img: ctl flush: $(cat "$WORK/flush.out")"
  [[ $(sb "$(spec_a "$img")" state) == clean ]] || fail "$img: not clean after ctl flush"
  # Its own process group: dbench forks a process per client.
  setsid dbench -D "$MNT/db" -t 600 -c /usr/share/dbench/client.txt 2 >"$WORK/dbench.$img.log" 2>&1 &
  DBENCH_PID=$!
  python3 "$WORK/writer.py" "$MNT/w" "$WORK/$img.files" 2>"$WORK/writer.$img.log" &
  WRITER_PID=$!
  on_exit "kill -- -$DBENCH_PID; kill $WRITER_PID"
  sleep "$SECS"
  kill -0 "$WRITER_PID" 2>/dev/null || fail "$img: the writer stopped: $(cat "$WORK/writer.$img.log")"
  kill -0 "$DBENCH_PID" 2>/dev/null || fail "$img: dbench stopped: $(tail "$WORK/dbench.$img.log")"
}
# The workload's end once its host is gone: the clients stop, ext4 (its
# device failing every request) is unmounted, nbdfuse and the loop go.
workload_end() {
  kill -- -"$DBENCH_PID" 2>/dev/null || true
  kill "$WRITER_PID" 2>/dev/null || true
  wait "$DBENCH_PID" "$WRITER_PID" 2>/dev/null || true
  detach
}

# Breaks the image's lock as host B, as doc/ceph.md says: `rbd lock ls`,
# then `rbd lock rm` (which blocklists the holder).
break_lock() {  # IMG
  local lock l
  lock=$(rbd_b lock ls --format json "rbd/$1") || fail "rbd lock ls rbd/$1"
  mapfile -t l < <(python3 -c 'import json, sys
for l in json.loads(sys.argv[1]): print(l["id"]); print(l["locker"]); print(l["address"])' "$lock")
  ((${#l[@]} == 3)) || fail "$1: want one lock, rbd lock ls says: $lock"
  log "$1: rbd lock rm rbd/$1 '${l[0]}' ${l[1]} (at ${l[2]})"
  rbd_b lock rm "rbd/$1" "${l[0]}" "${l[1]}" || fail "rbd lock rm rbd/$1 '${l[0]}' ${l[1]}"
  [[ $(rbd_b lock ls --format json "rbd/$1") == "[]" ]] || fail "$1: a lock is left: $(rbd_b lock ls "rbd/$1")"
  ceph -c "$CONF" osd blocklist ls 2>/dev/null | grep -qF "${l[2]}" ||
    fail "$1: ${l[1]} (${l[2]}) is not blocklisted: $(ceph -c "$CONF" osd blocklist ls 2>&1)"
}

# The consistency promise the backing superblock makes: consistent_as_of
# (unix seconds; 0 = none, which a dirty device in flush order must not say).
promise() {  # SPEC LABEL
  local t
  t=$(sb "$1" consistent_as_of)
  [[ $t =~ ^[0-9]+$ ]] && ((t > 0)) ||
    fail "$2: consistent_as_of '$t' on a dirty device in flush order (want a time): $("$UBCACHE" show-super "$1")"
  echo "$t"
}

# The image's client data (rbd export past data_offset) in $WORK/$2.
export_data() {  # IMG NAME
  local off
  off=$(sb "$(spec_b "$1")" data_offset)
  ((off == 8192)) || fail "$1: data_offset '$off', want 8192 (format's default)"
  rbd_b export --no-progress "rbd/$1" "$WORK/$2.full" 2>"$WORK/export.err" || fail "rbd export rbd/$1: $(cat "$WORK/export.err")"
  dd if="$WORK/$2.full" of="$WORK/$2" bs="$off" skip=1 conv=sparse status=none
}

# Checks the ext4 on COPY as a new owner finds it: the journal replayed
# (e2fsck -E journal_only), e2fsck -fn clean, the seed files and every file
# the writer saw fsynced before T intact, and the writer's files what a
# power cut leaves (check_files.py). Prints what it found; fails with the
# label, unless EXPECT is "bad": then it returns 1 when a check bit.
check_fs() {  # LABEL COPY T FILES [bad]
  local label=$1 copy=$2 t=$3 files=$4 expect=${5:-good} out rc=0
  local name=${label//[^a-z0-9]/_}
  out=$(e2fsck -E journal_only -y "$copy" 2>&1) || rc=$?
  ((rc <= 1)) || { [[ $expect == bad ]] && return 1; EVIDENCE+=("$copy" "$LOST_CACHE"); fail "$label: the journal replay (e2fsck -E journal_only) exited $rc: $out"; }
  rc=0
  out=$(e2fsck -fn "$copy" 2>&1) || rc=$?
  echo "$out" >"$WORK/$name.e2fsck.out"
  if ((rc != 0)); then
    [[ $expect == bad ]] && { log "$label: e2fsck -fn exited $rc (as it should)"; return 1; }
    EVIDENCE+=("$copy" "$LOST_CACHE")
    fail "$label: e2fsck -fn exited $rc after the journal replay:
$out"
  fi
  # Exit 0 with -n: nothing left uncorrected. After a crash it still
  # prints the superblock's free counts, which ext4 keeps lazily.
  log "$label: e2fsck -fn exit 0 ($(grep -c 'Fix? no' <<<"$out") 'Fix? no', all of: $(grep -o '^Free [a-z]* count wrong' <<<"$out" | sort -u | paste -sd, -))"
  local mnt=$WORK/check
  mkdir -p "$mnt"
  mount -o ro,loop,noload "$copy" "$mnt" || fail "$label: cannot mount the replayed copy"
  rc=0
  out=$(python3 "$WORK/check_files.py" "$mnt" "$t" "$files" "$WORK/seed.sums" "$WORK/$name.k") || rc=$?
  umount "$mnt"
  if ((rc != 0)); then
    [[ $expect == bad ]] && { log "$label: the file check bit: $(grep -m1 BAD <<<"$out")"; return 1; }
    EVIDENCE+=("$copy" "$LOST_CACHE")
    fail "$label: the files are not what a power cut after T=$t could have left: $out"
  fi
  log "$label: $out"
  return 0
}

# The controls: COPY (replayed, clean) with a block of an early checked
# file zeroed must fail the file check, and with the writer's directory
# block zeroed must fail e2fsck.
controls() {  # LABEL COPY T FILES
  local label=$1 copy=$2 t=$3 files=$4 name blk dir
  name=$(awk -v t="$t" '$4 < t {print $1; exit}' "$files")
  [[ -n $name ]] || name=$(awk '{print $2; exit}' "$WORK/seed.sums")
  local path=/w/$name
  [[ $name == s* ]] && path=/seed/$name
  cp --sparse=always "$copy" "$WORK/doctored.img"
  blk=$(debugfs -R "bmap $path 0" "$WORK/doctored.img" 2>/dev/null)
  [[ $blk =~ ^[0-9]+$ ]] && ((blk > 0)) || fail "$label: debugfs bmap $path: '$blk'"
  dd if=/dev/zero of="$WORK/doctored.img" bs=4096 seek="$blk" count=1 conv=notrunc status=none
  check_fs "$label control: block $blk of $path zeroed" "$WORK/doctored.img" "$t" "$files" bad &&
    fail "$label: the check missed block $blk of $path zeroed"
  cp --sparse=always "$copy" "$WORK/doctored.img"
  # The writer's directory, or /seed's when the image holds no /w yet (its
  # mkdir came after T and was not written back: allowed).
  local d=/w
  debugfs -R "stat /w" "$WORK/doctored.img" 2>/dev/null | grep -q '^Inode:' || d=/seed
  dir=$(debugfs -R "bmap $d 0" "$WORK/doctored.img" 2>/dev/null)
  [[ $dir =~ ^[0-9]+$ ]] && ((dir > 0)) || fail "$label: debugfs bmap $d: '$dir'"
  dd if=/dev/zero of="$WORK/doctored.img" bs=4096 seek="$dir" count=1 conv=notrunc status=none
  check_fs "$label control: the block of $d zeroed" "$WORK/doctored.img" "$t" "$files" bad &&
    fail "$label: e2fsck missed the directory block $dir of $d zeroed"
  rm -f "$WORK/doctored.img"
}

# ---- 1. a dead host ----
t0=$SECONDS
host_a dead "$WORK/cacheA.img"
holder=$(rbd_a status --format json rbd/dead | python3 -c 'import json,sys; print(json.load(sys.stdin)["watchers"][0]["address"])')
dirty=$(ctl get dirty_data)
written=$(ctl get writeback_written)
lag=$(ctl get writeback_lag_seconds 2>/dev/null || echo "?")
kill -KILL "$SERVER_PID"
killed=$(date +%s.%N)
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""
((dirty >= MIN_DIRTY)) || fail "1: only $dirty bytes dirty at the kill (want $MIN_DIRTY or more)"
log "1: A ($holder) killed with $((dirty / M)) MiB dirty ($((written / M)) MiB written back, writeback_lag_seconds $lag), $(wc -l <"$WORK/dead.files") files fsynced, at $killed"
workload_end
mv "$WORK/cacheA.img" "$WORK/dead-host-cache.img"  # the host is dead: B never sees it
LOST_CACHE=$WORK/dead-host-cache.img

# B, as doc/ceph.md "A dead host" says.
break_lock dead
IMG=$(spec_b dead)
[[ $(sb "$IMG" state) == dirty && $(sb "$IMG" writeback_order) == flush ]] ||
  fail "1: the image's superblock: state $(sb "$IMG" state), writeback_order $(sb "$IMG" writeback_order)"
T=$(promise "$IMG" "1")
log "1: T = $T ($(date -u -d "@$T" +%FT%TZ)), $(python3 -c "import sys; print(round(float(sys.argv[1]) - int(sys.argv[2]), 1))" "$killed" "$T") s before the kill"
before=$(sb_bytes dead)
rc=0
"$UBCACHE" forget-cache "$IMG" >"$WORK/forget.out" 2>&1 || rc=$?
log "1: forget-cache without --yes (exit $rc):
$(cat "$WORK/forget.out")"
((rc == 2)) || fail "1: forget-cache without --yes exited $rc, want 2"
expect_contains "$(cat "$WORK/forget.out")" "nothing changed" "1: the report"
expect_contains "$(cat "$WORK/forget.out")" "consistent as of $(date -u -d "@$T" +%FT%TZ)" "1: the report"
[[ $(sb_bytes dead) == "$before" ]] ||
  fail "1: forget-cache without --yes changed the superblock"
rc=0
"$UBCACHE" forget-cache --yes "$IMG" >"$WORK/forget-yes.out" 2>&1 || rc=$?
((rc == 0)) || fail "1: forget-cache --yes exited $rc: $(cat "$WORK/forget-yes.out")"
expect_contains "$(cat "$WORK/forget-yes.out")" "detached" "1: forget-cache --yes"
[[ $(sb "$IMG" state) == none ]] || fail "1: state $(sb "$IMG" state) after forget-cache --yes, want none"

export_data dead dead.img
check_fs "1 dead host" "$WORK/dead.img" "$T" "$WORK/dead.files"
controls "1 dead host" "$WORK/dead.img" "$T" "$WORK/dead.files"
rm -f "$WORK/dead.img" "$WORK/dead.img.full"

# B serves the image alone and mounts it (its kernel replays the journal):
# the same files are there as in the copy.
start_server --backing "$IMG" --nbd "unix:$SOCK"
attach $((SIZE - 8192))
mount -t ext4 "$LOOP" "$MNT" || fail "1: B cannot mount the image it serves"
out=$(python3 "$WORK/check_files.py" "$MNT" "$T" "$WORK/dead.files" "$WORK/seed.sums" "$WORK/served.k") ||
  fail "1: B's mount of the image it serves: $out"
[[ $(cat "$WORK/served.k") == $(cat "$WORK/1_dead_host.k") ]] ||
  fail "1: B's mount finds $(cat "$WORK/served.k") files intact, the copy $(cat "$WORK/1_dead_host.k")"
log "1: served by B alone: $out"
detach
stop_server
log "1: done in $((SECONDS - t0)) s"

# ---- 2. a fenced host that is alive ----
t0=$SECONDS
host_a fenced "$WORK/cacheF.img"
dirty=$(ctl get dirty_data)
broke=$(date +%s.%N)
break_lock fenced
deadline=$((SECONDS + 15))
until [[ $(ctl get fenced 2>/dev/null) == 1 ]]; do
  ((SECONDS < deadline)) || fail "2: A not fenced 15 s after its lock was broken"
  sleep 0.2
done
fdirty=$(ctl get dirty_data)
written=$(ctl get writeback_written)
log "2: A fenced with $((fdirty / M)) MiB dirty ($((dirty / M)) MiB when its lock was broken)"
((fdirty >= MIN_DIRTY)) || fail "2: only $fdirty bytes dirty at the fence (want $MIN_DIRTY or more)"
rbd_b export --no-progress rbd/fenced "$WORK/fence1.full" 2>/dev/null || fail "2: rbd export"
sleep 3
[[ $(ctl get dirty_data) == "$fdirty" && $(ctl get writeback_written) == "$written" ]] ||
  fail "2: the fenced daemon wrote back: dirty $fdirty -> $(ctl get dirty_data), written $written -> $(ctl get writeback_written)"
workload_end
server_alive "fenced"
kill -TERM "$SERVER_PID"
deadline=$((SECONDS + 60))
while kill -0 "$SERVER_PID" 2>/dev/null; do
  ((SECONDS < deadline)) || fail "2: the fenced daemon did not stop within 60 s of SIGTERM"
  sleep 0.2
done
rc=0
wait "$SERVER_PID" || rc=$?
SERVER_PID=
((rc == 1)) || fail "2: the fenced daemon exited $rc after SIGTERM (want 1)"
rbd_b export --no-progress rbd/fenced "$WORK/fence2.full" 2>/dev/null || fail "2: rbd export"
cmp -s "$WORK/fence1.full" "$WORK/fence2.full" || fail "2: the image changed after the fence: $(cmp "$WORK/fence1.full" "$WORK/fence2.full" | head -n 1)"
rm -f "$WORK/fence2.full"
IMG=$(spec_a fenced)
LOST_CACHE=$WORK/cacheF.img
[[ $(sb "$IMG" state) == dirty && $(sb "$IMG" writeback_order) == flush ]] ||
  fail "2: the image's superblock: state $(sb "$IMG" state), writeback_order $(sb "$IMG" writeback_order)"
T=$(promise "$IMG" "2")
log "2: T = $T ($(date -u -d "@$T" +%FT%TZ)), $(python3 -c "import sys; print(round(float(sys.argv[1]) - int(sys.argv[2]), 1))" "$broke" "$T") s before the lock was broken"
start_server --cache "$WORK/cacheF.img" --backing "$IMG" --nbd "unix:$SOCK" --control "$CTL_SOCK" --after-fence discard
expect_contains "$(cat "$SERVER_LOG")" "of it dirty)" "2: the discard's log line"
[[ $(ctl get dirty_data) == 0 && $(ctl get fenced) == 0 ]] || fail "2: after discard: dirty $(ctl get dirty_data), fenced $(ctl get fenced)"
deadline=$((SECONDS + 30))
until [[ $(ctl get state) == clean ]]; do
  ((SECONDS < deadline)) || fail "2: after discard the backing superblock stays $(ctl get state)"
  sleep 0.5
done
stop_server
[[ $(sb "$IMG" state) == clean ]] || fail "2: state $(sb "$IMG" state) after the discard, want clean"
export_data fenced fenced.img
cmp -s <(tail -c +8193 "$WORK/fence1.full") "$WORK/fenced.img" || fail "2: --after-fence discard changed the image's data"
check_fs "2 fenced host" "$WORK/fenced.img" "$T" "$WORK/fenced.files"
log "2: done in $((SECONDS - t0)) s"
log "ok"
