#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 010-nbdinfo — nbdinfo (libnbd) sees the export's size, every transmission
# flag the interface promises, the block-size constraints, the export name
# (and "" as an alias for it), --list, --read-only and a TCP listener.
source "$(dirname "$0")/lib.sh"

# check_info URI EXPECTED_SIZE READ_ONLY(true|false) — text and JSON output.
check_info() {
  local uri=$1 size=$2 ro=$3 out
  out=$(timeout 30 nbdinfo "$uri" 2>&1) || fail "nbdinfo $uri failed: $out"
  local want wants=("export-size: $size " "is_read_only: $ro" \
      "can_flush: true" "can_cache: true" "can_multi_conn: true" \
      "block_size_minimum: 512" "block_size_preferred: 4096" \
      "block_size_maximum: 33554432" "base:allocation" "description: ")
  # Write-side flags are only promised on a writable export.
  [[ $ro == true ]] || wants+=("can_fua: true" "can_trim: true" "can_zero: true" "can_fast_zero: true")
  for want in "${wants[@]}"; do
    expect_contains "$out" "$want" "nbdinfo $uri"
  done
  # The JSON form, parsed, so a field cannot match by accident elsewhere.
  out=$(timeout 30 nbdinfo --json "$uri" 2>&1) || fail "nbdinfo --json $uri failed: $out"
  NBDINFO_JSON=$out python3 - "$size" "$ro" <<'EOF' || fail "nbdinfo --json $uri: wrong fields (above); output was:
$out"
import json, os, sys
size, ro = int(sys.argv[1]), sys.argv[2] == "true"
doc = json.loads(os.environ["NBDINFO_JSON"])
exports = doc["exports"]
assert len(exports) == 1, f"expected one export, got {len(exports)}"
e = exports[0]
want = {"export-size": size, "is_read_only": ro, "can_flush": True, "can_cache": True,
        "can_multi_conn": True, "block_size_minimum": 512,
        "block_size_preferred": 4096, "block_size_maximum": 32 << 20}
if not ro:
    want.update({"can_fua": True, "can_trim": True, "can_zero": True, "can_fast_zero": True})
bad = {k: (v, e.get(k)) for k, v in want.items() if e.get(k) != v}
if bad:
    for k, (w, g) in bad.items():
        print(f"  {k}: expected {w!r}, got {g!r}", file=sys.stderr)
    sys.exit(1)
assert doc["protocol"] == "newstyle-fixed", doc["protocol"]
assert doc["structured"] is True, "structured replies not negotiated"
assert "base:allocation" in e.get("contexts", []), e.get("contexts")
EOF
}

# --- default export name, mem: backing, Unix and TCP listeners
port=$(free_tcp_port)
start_server --backing mem:1G --nbd "unix:$SOCK" --nbd "tcp:127.0.0.1:$port"
check_info "$(nbd_uri)" 1073741824 false
check_info "$(nbd_uri ubcache)" 1073741824 false
check_info "nbd://127.0.0.1:$port/ubcache" 1073741824 false

out=$(timeout 30 nbdinfo --list "$(nbd_uri)" 2>&1) || fail "nbdinfo --list failed: $out"
expect_contains "$out" 'export="ubcache":' "nbdinfo --list"
expect_contains "$out" "export-size: 1073741824 " "nbdinfo --list"

# An unknown export name is refused (NBD_REP_ERR_UNKNOWN) and the server lives on.
if out=$(timeout 30 nbdinfo "$(nbd_uri nosuch)" 2>&1); then
  fail "nbdinfo on unknown export 'nosuch' succeeded: $out"
fi
expect_contains "$out" "server replied with error to opt_go request" "unknown export"
server_alive "after GO for an unknown export"
check_info "$(nbd_uri)" 1073741824 false
stop_server

# --- --export NAME: NAME and "" select it, "ubcache" no longer does.
start_server --backing mem:256M --nbd "unix:$SOCK" --export disk0 --threads 2
check_info "$(nbd_uri disk0)" 268435456 false
check_info "$(nbd_uri)" 268435456 false
if out=$(timeout 30 nbdinfo "$(nbd_uri ubcache)" 2>&1); then
  fail "export 'ubcache' still served with --export disk0: $out"
fi
out=$(timeout 30 nbdinfo --list "$(nbd_uri)" 2>&1) || fail "nbdinfo --list failed: $out"
expect_contains "$out" 'export="disk0":' "nbdinfo --list with --export disk0"
stop_server

# --- --read-only
start_server --backing mem:64M --nbd "unix:$SOCK" --read-only
check_info "$(nbd_uri)" 67108864 true
# libnbd refuses writes itself on a read-only export; the server-side EPERM is
# checked by 060-protocol with raw requests.
out=$(timeout 30 nbdsh -u "$(nbd_uri)" -c 'assert h.is_read_only(); print(len(h.pread(4096, 0)))' 2>&1) ||
  fail "nbdsh read from read-only export failed: $out"
expect_contains "$out" "4096" "read from read-only export"
stop_server

# --- file backing (O_DIRECT): size comes from the file.
img=$WORK/backing.img
truncate -s 48M "$img"
start_server --backing "$img" --nbd "unix:$SOCK"
out=$(timeout 30 nbdinfo "$(nbd_uri)" 2>&1) || fail "nbdinfo on file backing failed: $out"
expect_contains "$out" "export-size: 50331648 " "file backing size"
min=$(sed -n 's/.*block_size_minimum: //p' <<<"$out")
[[ $min == 512 || $min == 4096 ]] || fail "file backing: block_size_minimum '$min' is not the logical block size (512 or 4096)"
stop_server
