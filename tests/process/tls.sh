#!/usr/bin/env bash
# TLS on the control plane with real processes: a throwaway CA and
# certificates made with the openssl CLI. A prefill with a garbage certificate
# file exits 2 at start; then a TLS prefill rank, and
#  - a plain caf-io decode (no [tls]) fails with a clear error within its
#    connection timeout (TLS and plain both wait for the other's first bytes:
#    never a hang);
#  - a decode whose certificate another CA signed (it trusts the right CA) is
#    refused: the prefill verifies the client (mutual TLS);
#  - a decode that trusts only another CA refuses the prefill's certificate;
#  - a decode with a certificate of the cluster's CA completes every room
#    bit-exactly (the token handshake on top, as without TLS).
# A prefill with a passphrase-protected key exits 2 at start too, without
# asking for the passphrase.
# Usage: tls.sh LAYERSTREAM HAVE_TLS (ON/OFF: the build found CAF's OpenSSL module)
source "$(dirname "$0")/lib.sh" "$@"

[ "${2:-ON}" = "ON" ] || skip "this build has no TLS (CAF's OpenSSL module was not found)"
command -v openssl >/dev/null 2>&1 || skip "no openssl CLI to make certificates"
require_provider "$PROVIDER"

# ---- a throwaway PKI ---------------------------------------------------------
PKI=$TMP/pki
mkdir -p "$PKI"
# make_ca NAME; make_cert NAME CA
make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 2 -subj "/CN=layerstream test CA $1" \
    -keyout "$PKI/$1.key" -out "$PKI/$1.pem" >"$PKI/$1.log" 2>&1 || die "openssl: CA $1: $(tail -n 2 "$PKI/$1.log")"
}
make_cert() {
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$1" -keyout "$PKI/$1.key" \
    -out "$PKI/$1.csr" >"$PKI/$1.log" 2>&1 &&
    openssl x509 -req -sha256 -days 2 -in "$PKI/$1.csr" -CA "$PKI/$2.pem" -CAkey "$PKI/$2.key" \
      -CAcreateserial -out "$PKI/$1.pem" >>"$PKI/$1.log" 2>&1 || die "openssl: cert $1: $(tail -n 2 "$PKI/$1.log")"
}
t=$(now)
make_ca ca
make_ca other
make_cert prefill ca
make_cert decode ca
make_cert intruder other
log "PKI made in $(since "$t") s"

CONNECTION_MS=${CONNECTION_MS:-2000}
BOUND_S=$((CONNECTION_MS / 1000 + 8)) # the connection timeout, start-up and shutdown

# A file OpenSSL cannot load is refused at start (in CAF's network thread it
# would be an uncaught exception at the first connection).
echo "not a certificate" >"$PKI/garbage.pem"
PREFILL_TLS="$PKI/garbage.pem $PKI/prefill.key $PKI/ca.pem"
write_prefill_config "$TMP/garbage.toml" 0 "$(free_port)"
timeout 10 "$BIN" prefill --config "$TMP/garbage.toml" >"$TMP/garbage.log" 2>&1
rc=$?
log "prefill with a garbage certificate: exit $rc"
[ "$rc" -eq 2 ] || fail "a prefill with a garbage certificate exited $rc, expected 2 at start"
grep -q 'tls.certificate ".*garbage.pem": not a PEM certificate' "$TMP/garbage.log" ||
  fail "no clear reason for the garbage certificate: $(tail -n 2 "$TMP/garbage.log")"

# A passphrase-protected key is refused at start, without asking for the
# passphrase: stdin stays open here, so a prompt would wait for it until the
# timeout.
openssl pkey -in "$PKI/prefill.key" -aes256 -passout pass:not-for-layerstream \
  -out "$PKI/prefill-encrypted.key" >"$PKI/encrypted.log" 2>&1 ||
  die "openssl: encrypted key: $(tail -n 2 "$PKI/encrypted.log")"
PREFILL_TLS="$PKI/prefill.pem $PKI/prefill-encrypted.key $PKI/ca.pem"
write_prefill_config "$TMP/encrypted.toml" 0 "$(free_port)"
t=$(now)
timeout 10 "$BIN" prefill --config "$TMP/encrypted.toml" >"$TMP/encrypted.log" 2>&1 \
  < <(exec sleep 12 >/dev/null 2>&1) # not holding ctest's output pipe
rc=$?
log "prefill with an encrypted key: exit $rc after $(since "$t") s"
[ "$rc" -eq 2 ] || fail "a prefill with an encrypted key exited $rc, expected 2 at start"
grep -q 'tls.key ".*prefill-encrypted.key": is encrypted' "$TMP/encrypted.log" ||
  fail "no clear reason for the encrypted key: $(tail -n 2 "$TMP/encrypted.log")"
grep -qi 'pass phrase' "$TMP/encrypted.log" && fail "the prefill asked for a passphrase"

PREFILL_TLS="$PKI/prefill.pem $PKI/prefill.key $PKI/ca.pem"
start_prefill 0 PF_PID PF_PORT
PF_LOG=$TMP/prefill-0.log

# expect_refused NAME WHAT REGEX: the decode exits 1 within BOUND_S with REGEX in its log,
# the prefill opened no room for it and is still alive.
expect_refused() {
  local name=$1 what=$2 re=$3 t
  t=$(now)
  start_decode "$name" "$PF_PORT"
  wait_exit "$DECODE_PID" "$BOUND_S"
  log "$what: exit $EXIT_CODE after $(since "$t") s"
  [ "$EXIT_CODE" -eq 1 ] || fail "$what: exited $EXIT_CODE, expected 1 within $BOUND_S s"
  local reason
  reason=$(grep -E "$re" "$TMP/$name.log" | head -n 1)
  [ -n "$reason" ] || fail "$what: no clear reason in its log (expected /$re/)"
  log "    $reason"
  grep -Eq "receiver: room|authenticated with" "$TMP/$name.log" && fail "$what: got past the handshake"
  kill -0 "$PF_PID" 2>/dev/null || die "the prefill died after: $what"
}

DECODE_TLS=""
expect_refused plain "plain caf-io decode against a TLS prefill" "cannot reach prefill rank"

DECODE_TLS="$PKI/intruder.pem $PKI/intruder.key $PKI/ca.pem"
expect_refused intruder "decode with a certificate of another CA" "cannot reach prefill rank"

DECODE_TLS="$PKI/decode.pem $PKI/decode.key $PKI/other.pem"
expect_refused distrust "decode trusting only another CA" "cannot reach prefill rank"

[ -z "$(settled_rooms "$PF_LOG" 0)" ] || fail "the prefill handled rooms before any good peer"
grep -q "authenticated" "$PF_LOG" && fail "the prefill authenticated a peer that failed TLS"

DECODE_TLS="$PKI/decode.pem $PKI/decode.key $PKI/ca.pem"
t=$(now)
start_decode good "$PF_PORT"
wait_exit "$DECODE_PID" 40
log "TLS decode: exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "the TLS decode exited $EXIT_CODE, expected 0"
json_check "$TMP/good.json" "$ALL_EXACT" || fail "rooms not all complete and bit-exact over TLS"
grep -q "control plane rank 0: peer .* authenticated" "$PF_LOG" ||
  fail "the prefill did not log the token authentication over TLS"
check_no_false_complete "$TMP/good.log"
stop_prefill "$PF_PID" 0
exit $FAILED
