#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 140-nbd-tls — NBD over TLS (NBD_OPT_STARTTLS) with real clients, with the
# credentials nbdkit and qemu-nbd use (certtool's X.509 directories,
# psktool's PSK files):
#   X.509, --tls require: nbdinfo, nbdcopy (data round trip) and qemu-io
#     connect; a plaintext client is refused and learns no export name; a
#     client that does not trust the server's CA gives up.
#   X.509 + --tls-verify-peer: a client certificate from another CA, or none,
#     is refused; the right one connects.
#   PSK: nbdinfo, nbdcopy and qemu-io with the right key; a wrong key and an
#     unknown identity are refused.
#   --tls on: plaintext and TLS clients both work.
#   nbd:nbds:// backing: a second ubcache serves the TLS export in clear,
#     and nbdcopy's data goes through both.
# ctest: label sanitized
source "$(dirname "$0")/lib.sh"

for t in certtool psktool nbdinfo nbdcopy nbdsh qemu-io; do
  command -v "$t" >/dev/null || fail "$t is not installed (scripts/install-deps installs it)"
done

# --- credentials ---------------------------------------------------------
make_tls_ca "$WORK/ca"
make_tls_ca "$WORK/rogue-ca"
SRV=$WORK/server-x509 CLI=$WORK/client-x509 ROGUE=$WORK/rogue-client
make_tls_cert "$WORK/ca" "$SRV" server
make_tls_cert "$WORK/ca" "$CLI" client
make_tls_cert "$WORK/rogue-ca" "$ROGUE" client            # trusts only the rogue CA
mkdir -p "$WORK/anon" && cp "$WORK/ca/ca-cert.pem" "$WORK/anon/"  # trusts ours, has no cert

mkdir -p "$WORK/psk" "$WORK/psk-wrong" "$WORK/psk-other"
psktool -u alice -p "$WORK/psk/keys.psk" >/dev/null
psktool -u alice -p "$WORK/psk-wrong/keys.psk" >/dev/null  # same identity, another key
psktool -u mallory -p "$WORK/psk-other/keys.psk" >/dev/null

src=$WORK/src.img
random_file "$src" 64
PORT=$(free_tcp_port)
TCP=127.0.0.1:$PORT

# expect_refused LABEL CMD... — CMD fails.
expect_refused() {
  local label=$1
  shift
  if timeout 30 "$@" >"$WORK/refused.out" 2>&1; then
    fail "$label: expected a refusal, but it connected: $(cat "$WORK/refused.out")"
  fi
  server_alive "after $label"
  log "$label: refused as expected: $(tail -n 1 "$WORK/refused.out")"
}

# roundtrip LABEL URI — nbdcopy src in and back out, compare.
roundtrip() {
  rm -f "$WORK/out.img"
  timeout 120 nbdcopy --connections=2 "$src" "$2" || fail "$1: nbdcopy into the export failed"
  # 4 MiB reads: each reply is encrypted over several send batches.
  timeout 120 nbdcopy --request-size=4194304 "$2" "$WORK/out.img" || fail "$1: nbdcopy out of the export failed"
  cmp "$WORK/out.img" "$src" || fail "$1: data read back over TLS differs"
}

# qemu_tls LABEL TLS_OBJECT PATTERN LEN — qemu-io over TCP with that
# tls-creds object writes LEN bytes of PATTERN at 1 MiB and reads them back.
qemu_tls() {
  timeout 60 qemu-io --object "$2" \
    --image-opts "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=$PORT,export=ubcache,tls-creds=tls0" \
    -c "write -P $3 1M $4" -c "read -P $3 1M $4" >"$WORK/qemu.out" 2>&1 ||
    fail "$1: qemu-io with $2: $(cat "$WORK/qemu.out")"
  grep -q "read $4/$4" "$WORK/qemu.out" || fail "$1: qemu-io read: $(cat "$WORK/qemu.out")"
}

# --- X.509, --tls require ----------------------------------------------------
start_server --backing mem:64M --nbd "unix:$SOCK" --nbd "tcp:$TCP" --tls require --tls-certificates "$SRV"
X509_UNIX="nbds+unix:///?socket=$SOCK&tls-certificates=$CLI"
out=$(timeout 30 nbdinfo "$X509_UNIX") || fail "x509: nbdinfo over nbds+unix failed"
expect_contains "$out" "export-size: 67108864" "x509: nbdinfo"
out=$(timeout 30 nbdinfo "nbds://127.0.0.1:$PORT/ubcache?tls-certificates=$CLI") ||
  fail "x509: nbdinfo over nbds:// (TCP) failed"
expect_contains "$out" "export-size: 67108864" "x509: nbdinfo tcp"
roundtrip x509 "$X509_UNIX"
qemu_tls x509 "tls-creds-x509,id=tls0,endpoint=client,dir=$CLI" 0x5a 1048576
# A plaintext client learns nothing: not the export, not the list.
expect_refused "x509: plaintext nbdinfo" nbdinfo "nbd+unix:///?socket=$SOCK"
expect_refused "x509: plaintext nbdinfo --list" nbdinfo --list "nbd+unix:///?socket=$SOCK"
grep -q "ubcache" "$WORK/refused.out" && fail "x509: a plaintext --list learned the export name: $(cat "$WORK/refused.out")"
out=$(timeout 30 nbdsh -c '
h.set_tls(nbd.TLS_DISABLE)
h.set_opt_mode(True)
h.connect_uri("nbd+unix:///?socket='"$SOCK"'")
try:
    h.opt_list(lambda name, desc: print("LISTED", name))
    print("LIST-ANSWERED")
except nbd.Error as e:
    print("LIST-REFUSED", e)
' 2>&1) || true
expect_contains "$out" "LIST-REFUSED" "x509: NBD_OPT_LIST before STARTTLS"
grep -q "LISTED" <<<"$out" && fail "x509: NBD_OPT_LIST before STARTTLS named an export: $out"
# A client that does not trust our CA gives up on the server's certificate
# (over TCP: libnbd checks a server's certificate against its host name,
# and over a Unix socket it has none).
expect_refused "x509: client trusting another CA" nbdinfo "nbds://127.0.0.1:$PORT/?tls-certificates=$ROGUE"
stop_server

# --- X.509 with client certificates verified ----------------------------------
start_server --backing mem:64M --nbd "unix:$SOCK" --tls-certificates "$SRV" --tls-verify-peer
out=$(timeout 30 nbdinfo "$X509_UNIX") || fail "verify-peer: nbdinfo with a client certificate failed"
expect_contains "$out" "export-size: 67108864" "verify-peer: nbdinfo"
# A certificate from another CA (the client is told to trust ours so that
# only the server's check can refuse it).
cp "$WORK/ca/ca-cert.pem" "$ROGUE/ca-cert.pem"
expect_refused "verify-peer: client certificate from another CA" \
  nbdinfo "nbds+unix:///?socket=$SOCK&tls-certificates=$ROGUE"
expect_refused "verify-peer: no client certificate" nbdinfo "nbds+unix:///?socket=$SOCK&tls-certificates=$WORK/anon"
grep -q "TLS refused" "$SERVER_LOG" || fail "verify-peer: the server did not log the refusal"
stop_server

# --- PSK ---------------------------------------------------------------------
start_server --backing mem:64M --nbd "unix:$SOCK" --nbd "tcp:$TCP" --tls-psk "$WORK/psk/keys.psk"
PSK_UNIX="nbds+unix://alice@/?socket=$SOCK&tls-psk-file=$WORK/psk/keys.psk"
out=$(timeout 30 nbdinfo "$PSK_UNIX") || fail "psk: nbdinfo failed"
expect_contains "$out" "export-size: 67108864" "psk: nbdinfo"
roundtrip psk "$PSK_UNIX"
qemu_tls psk "tls-creds-psk,id=tls0,endpoint=client,dir=$WORK/psk,username=alice" 0xc3 65536
expect_refused "psk: wrong key" nbdinfo "nbds+unix://alice@/?socket=$SOCK&tls-psk-file=$WORK/psk-wrong/keys.psk"
expect_refused "psk: unknown identity" nbdinfo "nbds+unix://mallory@/?socket=$SOCK&tls-psk-file=$WORK/psk-other/keys.psk"
expect_refused "psk: plaintext" nbdinfo "nbd+unix:///?socket=$SOCK"

# --- nbd:nbds:// backing: a plaintext export of the TLS one ---------------------
SOCK2=$WORK/front.sock
"$UBCACHE" serve --backing "nbd:$PSK_UNIX" --nbd "unix:$SOCK2" --export front 2>"$WORK/front.log" &
FRONT_PID=$!
on_exit "kill $FRONT_PID"
for _ in $(seq 200); do [[ -S $SOCK2 ]] && break; kill -0 $FRONT_PID 2>/dev/null || break; sleep 0.05; done
[[ -S $SOCK2 ]] || fail "nbd:nbds backing: the front server did not start: $(cat "$WORK/front.log")"
random_file "$src" 64
timeout 120 nbdcopy "$src" "nbd+unix:///front?socket=$SOCK2" || fail "nbd:nbds backing: nbdcopy in failed"
rm -f "$WORK/out.img"
timeout 120 nbdcopy "$PSK_UNIX" "$WORK/out.img" || fail "nbd:nbds backing: reading the TLS export failed"
cmp "$src" "$WORK/out.img" || fail "nbd:nbds backing: the TLS export does not hold what the front took"
kill -TERM $FRONT_PID
wait $FRONT_PID || fail "nbd:nbds backing: the front server exited non-zero: $(tail -n 5 "$WORK/front.log")"
stop_server

# --- --tls on: both kinds of client -------------------------------------------
start_server --backing mem:64M --nbd "unix:$SOCK" --tls on --tls-psk "$WORK/psk/keys.psk"
out=$(timeout 30 nbdinfo "nbd+unix:///?socket=$SOCK") || fail "tls on: plaintext nbdinfo failed"
expect_contains "$out" "export-size: 67108864" "tls on: plaintext"
out=$(timeout 30 nbdinfo "$PSK_UNIX") || fail "tls on: PSK nbdinfo failed"
expect_contains "$out" "export-size: 67108864" "tls on: PSK"
stop_server

# --- usage errors are clear ---------------------------------------------------
for bad in "--tls require" "--tls maybe --tls-psk $WORK/psk/keys.psk" \
  "--tls-psk $WORK/psk/keys.psk --tls-certificates $SRV" "--tls-certificates $WORK/nowhere"; do
  # shellcheck disable=SC2086
  if "$UBCACHE" serve --backing mem:16M --nbd "unix:$WORK/x.sock" $bad >"$WORK/usage.out" 2>&1; then
    fail "serve $bad: expected an error"
  fi
  log "serve $bad: $(head -n 1 "$WORK/usage.out")"
done
