# SPDX-License-Identifier: Apache-2.0
# vm_lib.sh — sourced (after lib.sh) by the tests that need a kernel driver
# this machine lacks (ublk_drv, nbd): they run a guest script under
# vm-run, a throw-away qemu guest with Debian's 6.12 kernel.
#
# Provides:
#   VM_RUN                 the vm-run tool: $VM_RUN, else $UBCACHE_SRC/../shared/tools/vm-run,
#                          else /work/shared/tools/vm-run; the test FAILS if none exists
#   vm_guest SCRIPT [OPTS] runs `sh SCRIPT` in a guest with $UBCACHE, guest_lib.sh and
#                          SCRIPT copied in (extra vm-run OPTS before them, e.g. --disk);
#                          output in $WORK/vm.N.log; fails the test unless the guest
#                          script exits 0 after printing its last line, `guest: OK`
#   disk_image PATH SIZE   a sparse raw image for --disk
# VM_VERBOSE=1 prints the whole guest output of a passing run too.
# Guest timings are functional only: the guest runs under software emulation.

if [[ -z ${VM_RUN:-} ]]; then
  for c in "$UBCACHE_SRC/../shared/tools/vm-run" /work/shared/tools/vm-run; do
    if [[ -x $c ]]; then VM_RUN=$c; break; fi
  done
fi
[[ -n ${VM_RUN:-} && -x $VM_RUN ]] ||
  fail "vm-run not found (set VM_RUN, or provide \$UBCACHE_SRC/../shared/tools/vm-run): this test needs a guest kernel with ublk_drv/nbd"

VM_COUNT=0
vm_guest() {
  local script=$1; shift
  VM_COUNT=$((VM_COUNT + 1))
  local out=$WORK/vm.$VM_COUNT.log rc=0 start=$SECONDS attempt
  log "guest run $VM_COUNT: $(basename "$script")"
  # The emulated guest kernel very rarely panics while booting (seen once:
  # an hrtimer fault in init_pipe_fs under TCG on a loaded host). Only then
  # — a panic before the guest script printed anything, so no disk was
  # touched — is the run tried once more; every other failure fails.
  for attempt in 1 2; do
    rc=0
    "$VM_RUN" --timeout "${VM_TIMEOUT:-400}" --cwd "$WORK" --with "$UBCACHE" \
      --file "$INTEGRATION_DIR/guest_lib.sh" --file "$script" \
      --env "UBCACHE=$UBCACHE" --env "GUEST_LIB=$INTEGRATION_DIR/guest_lib.sh" \
      "$@" -- sh "$script" >"$out" 2>&1 || rc=$?
    if [[ $rc -eq 125 && $attempt -eq 1 ]] && grep -q 'Kernel panic' "$out" && ! grep -q '^guest:' "$out"; then
      log "guest run $VM_COUNT: the guest kernel panicked while booting; booting once more"
      mv "$out" "$out.boot-panic"
      continue
    fi
    break
  done
  log "guest run $VM_COUNT: exit $rc after $((SECONDS - start))s (emulated; functional timing only)"
  if [[ $rc -ne 0 ]]; then
    echo "---- guest output ($out) ----" >&2
    tail -n 80 "$out" >&2
    echo "---- end of guest output ----" >&2
    fail "guest script $(basename "$script") exited with status $rc"
  fi
  # A guest script ends with `say OK`: a script that stopped early (or never
  # ran) does not pass.
  grep -q '^guest: OK' "$out" || { tail -n 40 "$out" >&2; fail "guest script $(basename "$script") did not reach its end"; }
  if [[ -n ${VM_VERBOSE:-} ]]; then cat "$out" >&2; else grep '^guest:' "$out" >&2 || true; fi
}

disk_image() { rm -f "$1"; truncate -s "$2" "$1"; }
