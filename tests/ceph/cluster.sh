#!/usr/bin/env bash
# cluster.sh — a single-node Ceph cluster for tests and for trying ubcache's
# `rbd:` backing by hand: one ceph-mon and one ceph-osd with the memstore
# object store (RAM, nothing on disk) on 127.0.0.1, cephx on (so the
# credential path is exercised), a pool `rbd` of size 1, no manager.
# Debian 12's ceph-mon and ceph-osd (16.2); it starts in about 10 s.
#
#   tests/ceph/cluster.sh start DIR   make and start a cluster in DIR (empty
#                                      or missing); prints the conf path
#   tests/ceph/cluster.sh stop DIR    stop it (its daemons, by pid file)
#   tests/ceph/cluster.sh env DIR     prints CEPH_CONF=DIR/ceph.conf
#
# In DIR: ceph.conf (mon host, auth, memstore), ceph.client.admin.keyring
# (the admin's key: found by the conf's `keyring` path), log/ (daemon
# logs), run/ (pid files, admin sockets), mon.a/ and osd.0/ (their data).
# Clients need only `-c DIR/ceph.conf` (or CEPH_CONF): `rbd -c DIR/ceph.conf
# create rbd/img --size 64M`; ubcache: `--backing rbd,conf=DIR/ceph.conf:rbd/img`.
# OSD_MEMSTORE_BYTES (default 1 GiB) caps what the OSD holds in RAM.
# OSD_WATCH_TIMEOUT (seconds; default Ceph's 30) is how long a killed
# client's watch, and so its exclusive lock, outlives it.
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 2; }

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start() {
  local dir=$1
  command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null && command -v ceph >/dev/null ||
    die "ceph-mon, ceph-osd and ceph (ceph-common) are needed: scripts/install-deps installs them"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ -z $(ls -A "$dir") ]] || die "$dir is not empty"
  mkdir -p "$dir/log" "$dir/run" "$dir/mon.a" "$dir/osd.0"
  local fsid port conf=$dir/ceph.conf
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
osd objectstore = memstore
memstore device bytes = ${OSD_MEMSTORE_BYTES:-1073741824}
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

stop() {
  local dir=$1 f pid
  for f in "$dir"/run/*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true  # a test may have stopped it
  done
  for f in "$dir"/run/*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

case ${1:-} in
  start) [[ $# -eq 2 ]] || die "usage: cluster.sh start DIR"; start "$2" ;;
  stop) [[ $# -eq 2 ]] || die "usage: cluster.sh stop DIR"; stop "$2" ;;
  env) [[ $# -eq 2 ]] || die "usage: cluster.sh env DIR"; echo "CEPH_CONF=$2/ceph.conf" ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
