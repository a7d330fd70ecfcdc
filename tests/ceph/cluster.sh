#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cluster.sh — a single-node Ceph cluster for tests and for trying ubcache's
# `rbd:` backing by hand: one ceph-mon and one ceph-osd on 127.0.0.1, cephx
# on (so the credential path is exercised), a pool `rbd` of size 1, no
# manager. The OSD's object store is memstore (RAM, nothing on disk), or
# with OSD_OBJECTSTORE=bluestore, BlueStore over a sparse file (small fixed
# caches), which outlives the OSD: it can be killed and started again.
# Debian 12's ceph-mon and ceph-osd (16.2); it starts in about 10 s
# (BlueStore: 15 s).
#
#   tests/ceph/cluster.sh start DIR      make and start a cluster in DIR (empty
#                                         or missing); prints the conf path
#   tests/ceph/cluster.sh stop DIR       stop it (its daemons, by pid file)
#   tests/ceph/cluster.sh kill-osd DIR   SIGKILL the OSD, as a crash would; returns
#                                         once it is gone (the map still says up:
#                                         a lone OSD has no peer to report it)
#   tests/ceph/cluster.sh start-osd DIR  start it again on its store (BlueStore
#                                         only); returns once it is up and in and
#                                         every PG is active+clean (about 6 s)
#   tests/ceph/cluster.sh env DIR        prints CEPH_CONF=DIR/ceph.conf
#
# In DIR: ceph.conf (mon host, auth, object store), ceph.client.admin.keyring
# (the admin's key: found by the conf's `keyring` path), log/ (daemon
# logs), run/ (pid files, admin sockets), mon.a/ and osd.0/ (their data),
# with BlueStore osd.0.block (its device). Clients need only
# `-c DIR/ceph.conf` (or CEPH_CONF): `rbd -c DIR/ceph.conf create rbd/img
# --size 64M`; ubcache: `--backing rbd,conf=DIR/ceph.conf:rbd/img`.
# OSD_MEMSTORE_BYTES (default 1 GiB) caps what a memstore OSD holds in RAM;
# OSD_BLUESTORE_BYTES (default 2 GiB) is the size of BlueStore's file.
# OSD_WATCH_TIMEOUT (seconds; default Ceph's 30) is how long a killed
# client's watch, and so its exclusive lock, outlives it.
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 2; }

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The [global] lines for the OSD's object store (OSD_OBJECTSTORE).
store_conf() {
  local dir=$1
  case ${OSD_OBJECTSTORE:-memstore} in
    memstore)
      cat <<EOF
osd objectstore = memstore
memstore device bytes = ${OSD_MEMSTORE_BYTES:-1073741824}
EOF
      ;;
    bluestore)
      # One sparse file for data, RocksDB and its WAL; small fixed caches
      # (no autotuning toward Ceph's 4 GiB memory target); no fsck at mkfs
      # or mount; a short aio poll (each close of the device, four in a
      # start, waits one out).
      cat <<EOF
osd objectstore = bluestore
bluestore block path = $dir/osd.\$id.block
bluestore block create = true
bluestore block size = ${OSD_BLUESTORE_BYTES:-2147483648}
bluestore block preallocate file = false
bluestore fsck on mkfs = false
bluestore fsck on mount = false
bluestore cache autotune = false
bluestore cache size = 134217728
osd memory target = 1073741824
bdev aio poll ms = 20
EOF
      ;;
  esac
}

start() {
  local dir=$1
  command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null && command -v ceph >/dev/null ||
    die "ceph-mon, ceph-osd and ceph (ceph-common) are needed: scripts/install-deps installs them"
  [[ ${OSD_OBJECTSTORE:-memstore} == @(memstore|bluestore) ]] ||
    die "OSD_OBJECTSTORE is memstore or bluestore, not '$OSD_OBJECTSTORE'"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ -z $(ls -A "$dir") ]] || die "$dir is not empty"
  mkdir -p "$dir/log" "$dir/run" "$dir/mon.a" "$dir/osd.0"
  local fsid port conf=$dir/ceph.conf store
  store=$(store_conf "$dir")
  fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  port=$(free_port)
  cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
public addr = 127.0.0.1
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $dir/ceph.\$name.keyring
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
run dir = $dir/run
log file = $dir/log/\$name.log
# Clients (ubcache, rbd, ceph) run many at once as client.admin: no admin
# socket for them, only for the daemons.
admin socket =
mon data = $dir/mon.\$id
osd data = $dir/osd.\$id
$store
osd max object name len = 256
osd max object namespace len = 64
ms bind ipv6 = false
[mon]
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
[osd]
osd client watch timeout = ${OSD_WATCH_TIMEOUT:-30}
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
EOF
  # Keys: the monitors' own, the admin's (every cap), the OSD's.
  ceph-authtool --create-keyring "$dir/ceph.mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool --create-keyring "$dir/ceph.client.admin.keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  ceph-authtool "$dir/ceph.mon.keyring" --import-keyring "$dir/ceph.client.admin.keyring" >/dev/null
  monmaptool --create --addv a "[v2:127.0.0.1:$port]" --fsid "$fsid" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/ceph.mon.keyring" \
    >"$dir/log/mkfs-mon.log" 2>&1 || die "ceph-mon --mkfs failed: $(tail -n 5 "$dir/log/mkfs-mon.log")"
  ceph-mon -c "$conf" -i a 2>>"$dir/log/start.log" || die "ceph-mon did not start: $(tail -n 5 "$dir/log/mon.a.log")"
  local deadline=$((SECONDS + 60))
  until ceph -c "$conf" --connect-timeout 5 mon stat >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "the monitor did not answer within 60 s: $(tail -n 5 "$dir/log/mon.a.log")"
    sleep 0.5
  done
  # The OSD: registered, its key, its (memstore) store, started.
  local uuid id
  uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  id=$(ceph -c "$conf" osd new "$uuid")
  [[ $id == 0 ]] || die "the new OSD got id $id, expected 0"
  ceph -c "$conf" auth get-or-create osd.0 mon 'allow profile osd' osd 'allow *' mgr 'allow profile osd' \
    -o "$dir/ceph.osd.0.keyring" >/dev/null
  ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$uuid" >"$dir/log/mkfs-osd.log" 2>&1 ||
    die "ceph-osd --mkfs failed: $(tail -n 5 "$dir/log/mkfs-osd.log")"
  ceph-osd -c "$conf" -i 0 2>>"$dir/log/start.log" || die "ceph-osd did not start: $(tail -n 5 "$dir/log/osd.0.log")"
  deadline=$((SECONDS + 90))
  until [[ $(ceph -c "$conf" osd stat -f json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("num_up_osds", 0))' 2>/dev/null) == 1 ]]; do
    ((SECONDS < deadline)) || die "the OSD did not come up within 90 s: $(tail -n 5 "$dir/log/osd.0.log")"
    sleep 0.5
  done
  ceph -c "$conf" osd pool create rbd 8 >/dev/null 2>&1 || die "cannot create pool rbd"
  ceph -c "$conf" osd pool set rbd size 1 --yes-i-really-mean-it >/dev/null 2>&1 || true
  rbd -c "$conf" pool init rbd || die "rbd pool init failed"
  echo "$conf"
}

# The OSD before the monitor: a stopping OSD tells the monitor, and waits
# up to 5 s (osd_mon_shutdown_timeout) for one that is already gone.
stop() {
  local dir=$1
  stop_daemons "$dir" osd
  stop_daemons "$dir" mon
}

stop_daemons() {
  local dir=$1 type=$2 f pid
  for f in "$dir"/run/"$type".*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true  # a test may have stopped it
  done
  for f in "$dir"/run/"$type".*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

# pid_of DIR NAME — the pid in DIR/run/NAME.pid if that process runs (a
# zombie, which some containers never reap, counts as gone).
pid_of() {
  local f=$1/run/$2.pid pid
  [[ -s $f ]] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1
  echo "$pid"
}

# The OSD, as a crash would take it: SIGKILL, then wait until it is gone.
# The map still says it is up (one OSD has no peer to report it), so
# clients keep trying it until it comes back or their requests time out.
kill_osd() {
  local dir=$1 pid
  pid=$(pid_of "$dir" osd.0) || die "no OSD runs in $dir"
  kill -9 "$pid"
  for _ in $(seq 100); do pid_of "$dir" osd.0 >/dev/null || break; sleep 0.1; done
  ! pid_of "$dir" osd.0 >/dev/null || die "the OSD (pid $pid) is still there 10 s after SIGKILL"
  rm -f "$dir/run/osd.0.pid" "$dir/run/osd.0.asok"
}

# The OSD again, on the store it left: wait until the map has this new
# instance up and in, and every PG of every pool is active+clean.
start_osd() {
  local dir=$1 conf=$1/ceph.conf epoch
  [[ -f $conf ]] || die "no cluster in $dir"
  grep -q '^osd objectstore = bluestore$' "$conf" ||
    die "$dir's OSD keeps its data in RAM (memstore): it cannot start again after kill-osd (start the cluster with OSD_OBJECTSTORE=bluestore)"
  ! pid_of "$dir" osd.0 >/dev/null || die "the OSD already runs"
  epoch=$(ceph -c "$conf" --connect-timeout 10 osd dump -f json | python3 -c 'import json,sys; print(json.load(sys.stdin)["epoch"])') ||
    die "the monitor does not answer"
  ceph-osd -c "$conf" -i 0 2>>"$dir/log/start.log" || die "ceph-osd did not start: $(tail -n 5 "$dir/log/osd.0.log")"
  local deadline=$((SECONDS + 90))
  until ceph -c "$conf" --connect-timeout 5 osd dump -f json 2>/dev/null | python3 -c '
import json, sys
osd = json.load(sys.stdin)["osds"][0]
sys.exit(0 if osd["up"] == 1 and osd["in"] == 1 and osd["up_from"] > int(sys.argv[1]) else 1)' "$epoch"; do
    ((SECONDS < deadline)) || die "the OSD did not come up within 90 s: $(tail -n 5 "$dir/log/osd.0.log")"
    sleep 0.25
  done
  # No manager, so no `ceph pg stat`: the OSD itself says what its PGs are.
  until pgs_clean "$conf"; do
    ((SECONDS < deadline)) || die "the PGs are not all active+clean 90 s after the OSD started: $(pgs_clean "$conf" -v)"
    sleep 0.25
  done
}

# pgs_clean CONF [-v] — every PG of every pool is active+clean on osd.0
# (with -v, print the states).
pgs_clean() {
  local pools history
  pools=$(ceph -c "$1" --connect-timeout 5 osd dump -f json 2>/dev/null) || return 1
  history=$(ceph -c "$1" daemon osd.0 dump_pgstate_history 2>/dev/null) || return 1
  python3 - "$pools" "$history" "${2:-}" <<'EOF'
import json, sys
want = {f"{p['pool']}.{i:x}" for p in json.loads(sys.argv[1])["pools"] for i in range(p["pg_num"])}
have = {pg["pg"]: pg["currently"] for pg in json.loads(sys.argv[2])["pgs"]}
bad = {pg: have.get(pg, "missing") for pg in sorted(want) if have.get(pg) != "Started/Primary/Active/Clean"}
if sys.argv[3]:
    print(bad or "all active+clean")
sys.exit(1 if bad else 0)
EOF
}

case ${1:-} in
  start) [[ $# -eq 2 ]] || die "usage: cluster.sh start DIR"; start "$2" ;;
  stop) [[ $# -eq 2 ]] || die "usage: cluster.sh stop DIR"; stop "$2" ;;
  kill-osd) [[ $# -eq 2 ]] || die "usage: cluster.sh kill-osd DIR"; kill_osd "$2" ;;
  start-osd) [[ $# -eq 2 ]] || die "usage: cluster.sh start-osd DIR"; start_osd "$2" ;;
  env) [[ $# -eq 2 ]] || die "usage: cluster.sh env DIR"; echo "CEPH_CONF=$2/ceph.conf" ;;
  *) sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
