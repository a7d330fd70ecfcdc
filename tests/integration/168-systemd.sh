#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 168-systemd — ubcache@.service under a real systemd as PID 1: a Debian 12
# container (`systemd-nspawn -b`) of the tree scripts/nspawn-rootfs makes
# (cached, with the .deb's dependencies in it), the package built by
# scripts/build-deb (shared with 164-package) installed in it with dpkg, an
# NBD export on a Unix socket in a directory bind-mounted from the host,
# read and written by the host's nbdcopy and nbdsh. Checks:
#  - `systemctl start ubcache@demo` returns once the daemon said READY=1
#    (Type=notify): active (running), its STATUS= line in the unit's
#    StatusText; `ubcache status` in the container shows the export;
#  - data written through the export is read back byte-exact;
#  - `kill -9` of the daemon: systemd restarts it (NRestarts=1, a new main
#    PID) and re-reading the data is all cache hits (the index survived);
#  - `systemctl reload` after a changed knob in /etc/ubcache/demo.conf:
#    the knob has the file's new value, the same process serves on;
#  - `systemctl restart`: a new process serves the same bytes, still warm,
#    with the reloaded knob;
#  - `systemctl stop`: inactive, the unit's result is success.
# The container shares the host's network and kernel; it has no ublk (the
# unit's modprobe of ublk_drv may fail: its `-` ignores that).
# Set UBCACHE_NSPAWN_ROOTFS=DIR to keep the Debian tree elsewhere than
# /var/tmp/ubcache-nspawn/bookworm; the container boots from an overlay on
# it, so the tree stays as the script made it.
# ctest: label systemd
# ctest: after 164-package
# (164 builds the package, alone on the machine; this test finds it built.)
# ctest: timeout 1800
# (a fresh machine debootstraps the tree, and builds the package when 164
# did not run: minutes each; a rerun takes under a minute.)
# ctest: cost 600
# (started among the first: it waits on downloads, and leaves the CPU to
# the tests beside it.)
source "$(dirname "$0")/lib.sh"

export DEBIAN_FRONTEND=noninteractive
[[ $(id -u) -eq 0 ]] || fail "needs root (systemd-nspawn, mount)"
for tool in systemd-nspawn debootstrap nsenter dpkg-deb nbdcopy nbdsh cmp; do
  command -v "$tool" >/dev/null || fail "$tool missing (scripts/install-deps installs it)"
done
ROOTFS=${UBCACHE_NSPAWN_ROOTFS:-/var/tmp/ubcache-nspawn/bookworm}
MACHINE=ubcache-168-$$
UNIT=ubcache@demo.service
TIMING=""
step_start=$SECONDS
timing() { TIMING+="${TIMING:+, }$1 $((SECONDS - step_start))s"; step_start=$SECONDS; }

# ---- the package and the Debian tree it boots in
DEB_DIR=$("$UBCACHE_SRC/scripts/build-deb" "$UBCACHE_SRC" 2>"$WORK/build-deb.log") ||
  fail "scripts/build-deb failed: $(tail -n 40 "$WORK/build-deb.log")"
DEB=$(compgen -G "$DEB_DIR/ubcache_*.deb") || fail "no .deb in $DEB_DIR"
timing package
# The package's dependencies go into the cached tree: installing it in the
# container then needs no network.
"$UBCACHE_SRC/scripts/nspawn-rootfs" "$ROOTFS" "$(dpkg-deb -f "$DEB" Depends)" >"$WORK/rootfs.log" 2>&1 ||
  fail "scripts/nspawn-rootfs failed: $(tail -n 40 "$WORK/rootfs.log")"
log "$(tail -n 1 "$WORK/rootfs.log")"
timing rootfs

# ---- the container: an overlay on the tree, the data directory bound in
ROOT=$WORK/root SRV=$WORK/srv
mkdir -p "$WORK/upper" "$WORK/overlay-work" "$ROOT" "$SRV"
mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$WORK/upper,workdir=$WORK/overlay-work" "$ROOT" ||
  fail "cannot mount an overlay on $ROOTFS"
on_exit "umount -l '$ROOT'"
cp "$DEB" "$ROOT/root/ubcache.deb"
CONSOLE=$WORK/console.log
# stdin is not a terminal: the console is read-only, to $CONSOLE. The host
# need not run systemd: no machine registration, no scope unit of its own
# (--register=no --keep-unit); nspawn leaves a directory for mount
# propagation behind, which goes with the container.
systemd-nspawn -b -q -D "$ROOT" -M "$MACHINE" --register=no --keep-unit --bind="$SRV:/srv/ubcache" \
  </dev/null >"$CONSOLE" 2>&1 &
NSPAWN=$!
on_exit "rm -rf '/run/systemd/nspawn/propagate/$MACHINE'"
stop_container() {
  kill -0 "$NSPAWN" 2>/dev/null || return 0
  kill -TERM "$NSPAWN"  # nspawn asks the container's systemd to power off
  for _ in $(seq 300); do kill -0 "$NSPAWN" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$NSPAWN" 2>/dev/null || true
  wait "$NSPAWN" 2>/dev/null || true
}
on_exit stop_container

# The container's PID 1, seen from here: nspawn's child in a new PID
# namespace whose own PID there is 1.
LEADER=""
for _ in $(seq 300); do
  kill -0 "$NSPAWN" 2>/dev/null || fail "systemd-nspawn exited: $(tail -n 30 "$CONSOLE")"
  for p in $(pgrep -P "$NSPAWN"); do
    if [[ $(awk '/^NSpid:/ {print $NF}' "/proc/$p/status" 2>/dev/null) == 1 ]]; then LEADER=$p; fi
  done
  [[ -n $LEADER ]] && break
  sleep 0.1
done
[[ -n $LEADER ]] || fail "no container PID 1 under systemd-nspawn ($NSPAWN): $(tail -n 30 "$CONSOLE")"
# Found, it may not have exec'd the container's init yet (its name is still
# nspawn's for a moment): what it runs is judged once it has.
comm=""
for _ in $(seq 300); do
  comm=$(cat "/proc/$LEADER/comm" 2>/dev/null) || fail "the container's PID 1 ($LEADER) went away: $(tail -n 30 "$CONSOLE")"
  [[ $comm == systemd ]] && break
  sleep 0.1
done
[[ $comm == systemd ]] || fail "the container's PID 1 is $comm after 30 s, not systemd"

# in_ct CMD... — runs CMD in the container (every namespace of its PID 1,
# its root), with a clean environment.
in_ct() {
  nsenter -t "$LEADER" -a -r -w -- /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"
}
ct_fail() {  # MSG — fail with the unit's journal
  echo "---- journal of $UNIT ----" >&2
  in_ct journalctl -q --no-pager -n 60 -u "$UNIT" >&2 || true
  echo "---- console tail ----" >&2
  tail -n 20 "$CONSOLE" >&2
  fail "$1"
}
# unit_prop NAME — a property of the unit, as `systemctl show` gives it.
unit_prop() { in_ct systemctl show -P "$1" "$UNIT"; }

# systemctl reaches PID 1 once it listens on its private socket; then
# --wait waits for the boot to end.
state=""
for _ in $(seq 1200); do
  kill -0 "$NSPAWN" 2>/dev/null || fail "systemd-nspawn exited: $(tail -n 30 "$CONSOLE")"
  state=$(timeout 120 nsenter -t "$LEADER" -a -r -w -- systemctl is-system-running --wait 2>&1) || true
  [[ $state == "Failed to connect to bus"* ]] || break
  sleep 0.1
done
[[ $state == running || $state == degraded ]] ||
  fail "the container's systemd did not finish booting: '$state': $(tail -n 30 "$CONSOLE")"
[[ $state == degraded ]] && log "booted degraded: $(in_ct systemctl --failed --no-legend --plain | tr '\n' ';')"
log "container $MACHINE booted ($(in_ct systemctl --version | head -n 1)), PID 1 is $LEADER here"
timing boot

# ---- the package, installed as an operator would (dpkg runs its scripts
# against the live systemd)
out=$(in_ct dpkg -i /root/ubcache.deb 2>&1) || ct_fail "dpkg -i ubcache.deb in the container: $out"
in_ct systemctl cat "$UNIT" >/dev/null 2>&1 || ct_fail "systemd does not know $UNIT after the install"

# ---- the cache and backing files, formatted by the package's ubcache
truncate -s 64M "$SRV/cache.img"
truncate -s 32M "$SRV/backing.img"
out=$(in_ct ubcache format --cache /srv/ubcache/cache.img --backing /srv/ubcache/backing.img 2>&1) ||
  fail "ubcache format in the container: $out"
CONF=$ROOT/etc/ubcache/demo.conf
cat >"$CONF" <<'CONF'
# 168-systemd: an NBD export on a socket the host reaches.
cache /srv/ubcache/cache.img
backing /srv/ubcache/backing.img
export demo
nbd unix:/srv/ubcache/demo.nbd
cache-mode writethrough
# Every read is cached (no cutoff, no congestion bypass): the warm checks
# count hits.
sequential-cutoff 0
congested-read-threshold-us 0
congested-write-threshold-us 0
set writeback_percent=10
CONF
URI="nbd+unix:///demo?socket=$SRV/demo.nbd"
ctl_get() { in_ct ubcache ctl --control /run/ubcache/demo.sock get "$1"; }

# ---- start: READY=1 and status
timeout 60 nsenter -t "$LEADER" -a -r -w -- systemctl start "$UNIT" ||
  ct_fail "systemctl start $UNIT failed"
[[ $(unit_prop ActiveState)/$(unit_prop SubState) == active/running ]] ||
  ct_fail "after start: $(unit_prop ActiveState)/$(unit_prop SubState)"
status_text=$(unit_prop StatusText)
[[ $status_text =~ ^1\ export,\ writethrough\;\ hit\ ratio ]] ||
  ct_fail "StatusText (the daemon's STATUS=) is '$status_text'"
PID1=$(unit_prop MainPID)
[[ -S $SRV/demo.nbd ]] || ct_fail "no NBD socket $SRV/demo.nbd after start"
out=$(in_ct ubcache status 2>&1) || ct_fail "ubcache status in the container exited $?: $out"
expect_contains "$out" "ubcache status: 1 daemon, 1 export" "ubcache status"
expect_contains "$out" "/run/ubcache/demo.sock" "ubcache status"
expect_contains "$out" "/srv/ubcache/backing.img" "ubcache status"
log "started: MainPID $PID1, StatusText '$status_text'"
timing start

# ---- data through the export, read back twice (the second from the cache)
random_file "$WORK/data" 16
nbdcopy "$WORK/data" "$URI" || ct_fail "nbdcopy to the export failed"
read_back() {  # WHAT — the export's first 16 MiB equal $WORK/data
  rm -f "$WORK/read"
  nbdsh -u "$URI" -c "
with open('$WORK/read', 'wb') as f:
    for off in range(0, 16 << 20, 1 << 20):
        f.write(h.pread(1 << 20, off))
" || ct_fail "$1: nbdsh read failed"
  cmp -s "$WORK/data" "$WORK/read" || ct_fail "$1: the data read back differs from what was written"
}
read_back "after the write"
read_back "the second read"

# hits_on_reread WHAT — reads the data once more; every read a hit.
hits_on_reread() {
  local h0 m0 h1 m1
  h0=$(ctl_get stats_total/cache_hits) m0=$(ctl_get stats_total/cache_misses)
  read_back "$1"
  h1=$(ctl_get stats_total/cache_hits) m1=$(ctl_get stats_total/cache_misses)
  log "$1: $((h1 - h0)) hits, $((m1 - m0)) misses"
  ((h1 - h0 >= 16 && m1 == m0)) || ct_fail "$1: $((h1 - h0)) hits and $((m1 - m0)) misses (want all hits)"
}
hits_on_reread "before the kill"

# ---- kill -9: systemd restarts it, warm
in_ct bash -c 'kill -KILL "$1"' kill "$PID1"
PID2=""
for _ in $(seq 200); do
  pid=$(unit_prop MainPID)
  if [[ $(unit_prop ActiveState) == active && $pid != 0 && $pid != "$PID1" ]]; then PID2=$pid; break; fi
  sleep 0.1
done
[[ -n $PID2 ]] || ct_fail "systemd did not restart the daemon after kill -9 of $PID1"
[[ $(unit_prop NRestarts) == 1 ]] || ct_fail "NRestarts after the kill: $(unit_prop NRestarts)"
for _ in $(seq 100); do [[ -S $SRV/demo.nbd ]] && break; sleep 0.1; done
hits_on_reread "after kill -9 and systemd's restart"
timing kill-restart

# ---- reload: a changed knob from the file, the same process
[[ $(ctl_get writeback_percent) == 10 ]] || ct_fail "writeback_percent from the file: $(ctl_get writeback_percent)"
[[ $(ctl_get congested_write_threshold_us) == 0 ]] ||
  ct_fail "congested_write_threshold_us from the file: $(ctl_get congested_write_threshold_us)"
# A --set line and an option's line, both live knobs.
sed -i 's/^set writeback_percent=10$/set writeback_percent=25/;
        s/^congested-write-threshold-us 0$/congested-write-threshold-us 5000/' "$CONF"
timeout 30 nsenter -t "$LEADER" -a -r -w -- systemctl reload "$UNIT" || ct_fail "systemctl reload $UNIT failed"
# systemd 252 counts the reload done when ExecReload's kill returns: the
# daemon may not have read the file yet.
for _ in $(seq 100); do [[ $(ctl_get writeback_percent) == 25 ]] && break; sleep 0.1; done
[[ $(ctl_get writeback_percent) == 25 ]] ||
  ct_fail "systemctl reload: writeback_percent is $(ctl_get writeback_percent), the file says 25"
[[ $(ctl_get congested_write_threshold_us) == 5000 ]] ||
  ct_fail "systemctl reload: congested_write_threshold_us is $(ctl_get congested_write_threshold_us), the file says 5000"
[[ $(unit_prop MainPID) == "$PID2" ]] || ct_fail "systemctl reload replaced the daemon"
out=$(in_ct journalctl -q --no-pager -u "$UNIT")
expect_contains "$out" "SIGHUP: re-read /etc/ubcache/demo.conf: set " "the reload in the journal"
timing reload

# ---- restart: a new process, the same bytes, still warm, the new knob
timeout 60 nsenter -t "$LEADER" -a -r -w -- systemctl restart "$UNIT" || ct_fail "systemctl restart $UNIT failed"
PID3=$(unit_prop MainPID)
[[ $(unit_prop ActiveState) == active && $PID3 != "$PID2" && $PID3 != 0 ]] ||
  ct_fail "after restart: $(unit_prop ActiveState), MainPID $PID3 (was $PID2)"
hits_on_reread "after systemctl restart"
[[ $(ctl_get writeback_percent) == 25 && $(ctl_get congested_write_threshold_us) == 5000 ]] ||
  ct_fail "after restart: writeback_percent $(ctl_get writeback_percent), congested_write_threshold_us $(ctl_get congested_write_threshold_us)"
timing restart

# ---- stop
timeout 60 nsenter -t "$LEADER" -a -r -w -- systemctl stop "$UNIT" || ct_fail "systemctl stop $UNIT failed"
[[ $(unit_prop ActiveState) == inactive ]] || ct_fail "after stop: $(unit_prop ActiveState)"
[[ $(unit_prop Result) == success ]] || ct_fail "after stop: Result $(unit_prop Result)"
timing stop
stop_container
log "times: $TIMING; whole test ${SECONDS}s"
