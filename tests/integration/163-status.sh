#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 163-status — `ubcache status`, its exact output shape and exit status:
#  1. no daemon (an empty socket directory): one line, exit 3; --json too;
#  2. one daemon with two exports, all well: the header, a block per export
#     (backing, cache, state, hits, dirty), exit 0; --json parses and names
#     both exports with their attributes;
#  3. one export detached (ctl detach): a PROBLEM line for it, the header
#     counts it, exit 1;
#  4. a failed cache device (every cache write fails, io_error_limit 8):
#     "the cache device failed" as a PROBLEM, exit 1;
#  5. a stale socket (the daemon was killed): NOT ANSWERING, exit 1.
source "$(dirname "$0")/lib.sh"

DIR=$WORK/run
mkdir -p "$DIR"
st() { "$UBCACHE" status --dir "$DIR" "$@"; }
expect_rc() {  # LABEL RC CMD...
  local label=$1 want=$2 rc=0
  shift 2
  out=$("$@" 2>&1) || rc=$?
  ((rc == want)) || fail "$label: exit $rc (want $want): $out"
}

# ---- 1. no daemon ----
expect_rc "no daemon" 3 st
[[ $out == "ubcache status: no daemon running (no control socket in $DIR)" ]] || fail "no daemon: '$out'"
expect_rc "no daemon, json" 3 st --json
[[ $out == '{"problems":0,"daemons":[]}' ]] || fail "no daemon, json: '$out'"

# ---- 2. two exports ----
C=$WORK/cache.img B1=$WORK/b1.img B2=$WORK/b2.img
truncate -s 128M "$C"; truncate -s 64M "$B1" "$B2"
"$UBCACHE" format --cache "$C" --backing "$B1" >/dev/null 2>&1 || fail "format"
"$UBCACHE" format --backing "$B2" >/dev/null 2>&1 || fail "format b2"
start_server --cache "$C" --backing "$B1" --backing "$B2" --export one --export two --nbd "unix:$SOCK" \
  --control "$DIR/disks.sock"
qio "reads for the statistics" "write -q -P 1 0 1M" "read -q -P 1 0 1M" "read -q -P 1 0 1M"
expect_rc "two exports" 0 st
python3 - "$out" "$DIR/disks.sock" "$B1" "$B2" "$C" <<'EOF' || fail "two exports: the output's shape"
import re, sys
out, sock, b1, b2, c = sys.argv[1:]
lines = out.split("\n")
assert lines[0] == "ubcache status: 1 daemon, 2 exports, all well", lines[0]
assert lines[1] == "" and lines[2] == sock, lines[1:3]
blocks = {}
for i, l in enumerate(lines):
    if l in ("  one", "  two"):
        blocks[l.strip()] = lines[i + 1:i + 6]
assert set(blocks) == {"one", "two"}, blocks
for name, b in (("one", b1), ("two", b2)):
    x = blocks[name]
    assert x[0] == f"    backing  {b}, 64.0 MiB", x[0]
    assert re.fullmatch(rf"    cache    {re.escape(c)}, writethrough, \d+ % used", x[1]), x[1]
    assert x[2] == "    state    clean", x[2]
    assert re.fullmatch(r"    hits     \d+ % total, (\d+ %|no reads) in the last five minutes", x[3]), x[3]
    assert x[4] == "    dirty    0 B", x[4]
assert "PROBLEM" not in out
EOF
expect_rc "two exports, json" 0 st --json
python3 -c 'import json, sys
d = json.loads(sys.argv[1])
assert d["problems"] == 0 and len(d["daemons"]) == 1, d
e = d["daemons"][0]["exports"]
assert [x["name"] for x in e] == ["one", "two"], e
assert e[0]["state"] == "clean" and e[0]["size"] == (64 << 20) - 8192 and e[0]["problems"] == [], e[0]' "$out" ||
  fail "two exports, json: $out"

# ---- 3. a detached export ----
"$UBCACHE" ctl --control "$DIR/disks.sock" --device two detach >/dev/null 2>&1 || fail "ctl detach"
expect_rc "a detached export" 1 st
expect_contains "$out" "ubcache status: 1 daemon, 2 exports, 1 problem" "a detached export: the header"
expect_contains "$out" "    state    no cache" "a detached export: its state"
expect_contains "$out" "    PROBLEM  detached: served without its cache" "a detached export: the problem"
expect_rc "a detached export, json" 1 st --json
python3 -c 'import json, sys
d = json.loads(sys.argv[1])
assert d["problems"] == 1, d
e = {x["name"]: x for x in d["daemons"][0]["exports"]}
assert e["two"]["problems"] == ["detached: served without its cache"] and e["one"]["problems"] == [], e' "$out" ||
  fail "a detached export, json: $out"

# ---- 5. a stale socket ----
kill -KILL "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
expect_rc "a stale socket" 1 st
expect_contains "$out" "ubcache status: 1 daemon, 0 exports, 1 problem" "a stale socket: the header"
expect_contains "$out" "  NOT ANSWERING: cannot reach the daemon at $DIR/disks.sock: Connection refused" "a stale socket"
rm -f "$DIR/disks.sock"

# ---- 4. a failed cache device ----
truncate -s 64M "$WORK/raw-cache.img"
start_server --cache "fault,eio_p=1,ops=w:$WORK/raw-cache.img" --backing "$B1" --nbd "unix:$SOCK" \
  --control "$DIR/failing.sock"
deadline=$((SECONDS + 30))
until [[ $("$UBCACHE" ctl --control "$DIR/failing.sock" get cache_failed) == 1 ]]; do
  ((SECONDS < deadline)) || fail "the cache did not fail after 30 s of failing writes"
  qemu-io -f raw "$(nbd_uri)" -c "read -q 0 4M" -c "read -q 4M 4M" >/dev/null 2>&1 || true
done
expect_rc "a failed cache" 1 st
expect_contains "$out" "1 problem" "a failed cache: the header"
[[ $out =~ "    PROBLEM  the cache device failed ("[0-9]+" I/O errors)" ]] || fail "a failed cache: no problem line: $out"
stop_server
log "ok"
