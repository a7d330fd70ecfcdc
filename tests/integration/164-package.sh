#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 164-package — the Debian package (debian/, issue 16): builds it with
# scripts/build-deb (`dpkg-buildpackage -us -uc -b` on a copy of the source
# tree; a tree built before, by 168-systemd say, is not built again), runs
# lintian on the .changes (fails on any E: tag, prints every other tag and
# each override's reason), installs the .deb with `apt-get install`, and
# checks from the installed files only:
#  - /usr/bin/ubcache --version prints the changelog's upstream version;
#  - `ubcache status` with no daemon exits 3 saying "no daemon running";
#  - `man ubcache` renders, and every subcommand's page is found;
#  - ubcache@.service is in systemd's unit dir and `systemd-analyze verify`
#    passes on it; /etc/ubcache exists;
#  - the bash completion loads and completes ubcache; the Grafana dashboard
#    and the config example are installed;
# then purges the package and checks that nothing of it is left. A failed
# run purges it too: the machine is left as it was found. Needs root; it
# refuses to run when a ubcache package or /usr/bin/ubcache is already
# there.
# How the package is built (no unit tests, no debug info): scripts/build-deb.
# ctest: run alone
# (the build keeps every core busy for minutes: beside it, other tests'
# deadlines would be noise, and it would miss its own timeout.)
# ctest: cost 900
# (the first of the tests that run alone: a build, not a measurement, it
# does not mind what scripts/test still runs in the background.)
source "$(dirname "$0")/lib.sh"

export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -y -q -o DPkg::Lock::Timeout=120)

[[ $(id -u) -eq 0 ]] || fail "needs root (apt-get install)"
for tool in git dpkg-buildpackage dh lintian man systemd-analyze pkg-config; do
  command -v "$tool" >/dev/null || fail "$tool missing (scripts/install-deps installs it)"
done
# pkg_state — dpkg's state of ubcache: "" or not-installed when it has none.
pkg_state() { dpkg-query -W -f='${db:Status-Status}' ubcache 2>/dev/null || true; }
pkg_present() { [[ ! $(pkg_state) =~ ^(not-installed)?$ ]]; }
if pkg_present; then
  fail "a ubcache package is already on this machine ($(pkg_state) $(dpkg-query -W -f='${Version}' ubcache)): not touching it"
fi
[[ ! -e /usr/bin/ubcache ]] || fail "/usr/bin/ubcache exists and no package owns it: not overwriting it"

# ---- build (or the build of the same tree, done before)
VERSION=$(dpkg-parsechangelog -l "$UBCACHE_SRC/debian/changelog" -S Version)
UPSTREAM=${VERSION%-*}
DEB_DIR=$("$UBCACHE_SRC/scripts/build-deb" "$UBCACHE_SRC" 2>"$WORK/build-deb.log") ||
  fail "scripts/build-deb failed: $(tail -n 40 "$WORK/build-deb.log")"
BUILD_SECONDS=$(cat "$DEB_DIR/done")
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
DEB=$DEB_DIR/ubcache_${VERSION}_$ARCH.deb
CHANGES=$DEB_DIR/ubcache_${VERSION}_$ARCH.changes
[[ -f $DEB && -f $CHANGES ]] || fail "no $DEB or $CHANGES after the build: $(ls "$DEB_DIR")"
log "$(tail -n 1 "$WORK/build-deb.log") (the build took ${BUILD_SECONDS}s)"

# ---- lintian: E: fails, the rest is printed (overridden tags with their reasons)
rc=0
lintian -I --pedantic --show-overrides "$CHANGES" >"$WORK/lintian.log" 2>&1 || rc=$?
sed 's/^/  lintian: /' "$WORK/lintian.log" >&2
grep -q '^E: ' "$WORK/lintian.log" && fail "lintian reports errors (E: above)"
((rc == 0)) || fail "lintian exited $rc"

# ---- install; from here on the package is purged however the test ends
purge() {
  if pkg_present; then
    "${APT[@]}" purge ubcache >>"$WORK/apt.log" 2>&1
  fi
}
on_exit purge
(cd "$DEB_DIR" && "${APT[@]}" install "./$(basename "$DEB")") >"$WORK/apt.log" 2>&1 ||
  fail "apt-get install ./$(basename "$DEB") failed: $(tail -n 20 "$WORK/apt.log")"
[[ $(dpkg-query -W -f='${Status} ${Version}' ubcache) == "install ok installed $VERSION" ]] ||
  fail "ubcache is not installed: $(dpkg-query -W -f='${Status} ${Version}' ubcache)"
[[ $(dpkg-query -S /usr/bin/ubcache) == "ubcache: /usr/bin/ubcache" ]] || fail "/usr/bin/ubcache is not the package's"

# --version: the upstream version (CMake's project VERSION = the changelog's)
out=$(/usr/bin/ubcache --version) || fail "ubcache --version exited $?"
[[ $out == "ubcache $UPSTREAM" ]] || fail "ubcache --version: '$out' (want 'ubcache $UPSTREAM')"

# status with no daemon: exit 3
mkdir "$WORK/empty"
rc=0
out=$(/usr/bin/ubcache status --dir "$WORK/empty" 2>&1) || rc=$?
((rc == 3)) || fail "ubcache status with no daemon: exit $rc (want 3): $out"
expect_contains "$out" "no daemon running" "ubcache status with no daemon"

# man pages: found through man's own search path, rendered
page=$(man -w ubcache) || fail "man -w ubcache finds no page"
[[ $page == /usr/share/man/man8/ubcache.8* ]] || fail "man ubcache is $page, not the package's"
out=$(MANWIDTH=80 man -P cat ubcache 2>"$WORK/man.err") || fail "man ubcache exited $?: $(cat "$WORK/man.err")"
[[ -s $WORK/man.err ]] && log "man ubcache warns: $(cat "$WORK/man.err")"
expect_contains "$out" "NAME" "man ubcache"
expect_contains "$out" "ubcache" "man ubcache"
((${#out} > 200)) || fail "man ubcache rendered only: $out"
for sub in serve format show-super ctl status probe; do
  man -w "ubcache-$sub" >/dev/null 2>&1 || fail "no man page ubcache-$sub(8)"
  MANWIDTH=80 man -P cat "ubcache-$sub" >/dev/null 2>&1 || fail "man ubcache-$sub does not render"
done

# systemd: the template unit where systemd looks, and verified
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null) || unitdir=/lib/systemd/system
unit=$unitdir/ubcache@.service
[[ -f $unit ]] || fail "no $unit"
dpkg-query -S "$unit" >/dev/null 2>&1 || fail "$unit is not the package's"
out=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit: $out"
[[ -n $out ]] && log "systemd-analyze verify: $out"
[[ -d /etc/ubcache ]] || fail "no /etc/ubcache"

# bash completion: where bash-completion loads it from, and it completes ubcache
compdir=$(pkg-config --variable=completionsdir bash-completion 2>/dev/null) ||
  compdir=/usr/share/bash-completion/completions
[[ -f $compdir/ubcache ]] || fail "no bash completion at $compdir/ubcache"
out=$(bash -c 'source "$1" && complete -p ubcache' _ "$compdir/ubcache" 2>&1) ||
  fail "the bash completion does not load or defines no completion for ubcache: $out"

# the Grafana dashboard (JSON) and the config example
dash=/usr/share/ubcache/grafana/ubcache.json
[[ -f $dash ]] || fail "no $dash"
python3 -m json.tool "$dash" >/dev/null || fail "$dash is not JSON"
compgen -G "/usr/share/doc/ubcache/examples/ubcache.conf.example*" >/dev/null ||
  fail "no /usr/share/doc/ubcache/examples/ubcache.conf.example"

# ---- purge: nothing of the package is left
files=$(dpkg-query -L ubcache | grep -v '^/\.$')
"${APT[@]}" purge ubcache >>"$WORK/apt.log" 2>&1 || fail "apt-get purge ubcache failed: $(tail -n 20 "$WORK/apt.log")"
! pkg_present || fail "ubcache is still $(pkg_state) after the purge"
while IFS= read -r f; do
  [[ -d $f || ! -e $f ]] || fail "$f is left after the purge"
done <<<"$files"
for d in /etc/ubcache /usr/share/ubcache /usr/share/doc/ubcache; do
  [[ ! -e $d ]] || fail "$d is left after the purge"
done
log "package build ${BUILD_SECONDS}s, whole test $((SECONDS))s"
