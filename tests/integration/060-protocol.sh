#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 060-protocol — raw NBD protocol cases (tests/integration/nbd_protocol.py):
# every malformed option and request the interface names gets its exact
# error reply or a disconnect, data stays untouched, and other connections
# keep working; then structured replies, BLOCK_STATUS, LIST, INFO,
# EXPORT_NAME, pipelining and misbehaving clients. Run on a writable and on
# a --read-only export; the server must survive all of it and exit 0.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

run_cases() {
  local mode=$1 rc=0
  timeout 400 python3 "$INTEGRATION_DIR/nbd_protocol.py" --socket "$SOCK" --mode "$mode" \
    --size $((64 << 20)) >"$WORK/protocol.$mode.log" 2>&1 || rc=$?
  cat "$WORK/protocol.$mode.log"
  server_alive "after the $mode protocol cases"
  [[ $rc -eq 0 ]] || failed+="
$(grep -A1 '^FAIL' "$WORK/protocol.$mode.log" | head -n 40)"
}

failed=""
start_server --backing mem:64M --nbd "unix:$SOCK" --threads 2
run_cases rw
stop_server

start_server --backing mem:64M --nbd "unix:$SOCK" --read-only
run_cases ro
stop_server
[[ -z $failed ]] || fail "protocol cases failed:$failed"
