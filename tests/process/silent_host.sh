#!/usr/bin/env bash
# A decode whose prefill rank sits on a host that drops every packet (down,
# or behind a firewall that drops) exits 1 within its connection timeout
# plus a margin, naming the rank. CAF 0.17's middleman connects in a
# blocking call that its shutdown waits for: the process used to exit only
# when the kernel's SYN retries ended (134 s measured, connection_ms 2 s).
# The decode runs in a network namespace of its own (unshare -n) with a veth
# pair: its packets to the rank's address go to a MAC nobody answers to, and
# leave nothing but that namespace. Skipped (77) without the privilege.
source "$(dirname "$0")/lib.sh" "$@"

unshare -n ip link add v0 type veth peer name v1 2>/dev/null ||
  skip "cannot make a network namespace with a veth pair here (unshare -n, ip link add)"
# The rank's address: in the namespace's own /24, with a static neighbour
# entry so that no ARP miss ends the connect early.
RANK=10.254.77.2
CP=1
CONTROL_HOST=$RANK
write_decode_config "$TMP/decode.toml" 7001
# An address outside loopback: allowed by the config, never reached.
sed -i 's/^\[cluster\]$/[cluster]\nnetwork = "deployment"/' "$TMP/decode.toml"
grep -q '^network = "deployment"' "$TMP/decode.toml" || die "could not write the config"

t0=$(now)
unshare -n bash -c '
  set -e
  ip link set lo up
  ip link add v0 type veth peer name v1
  ip addr add 10.254.77.1/24 dev v0
  ip link set v0 up
  ip link set v1 up
  ip neigh add '"$RANK"' lladdr 02:00:00:00:00:01 dev v0
  exec "$0" decode --config "$1" --log-level warn' "$BIN" "$TMP/decode.toml" \
  >"$TMP/decode.log" 2>&1 &
DECODE_PID=$!
started "$DECODE_PID"
# connection_ms (2 s) plus a margin for a loaded machine; the old exit took
# over 2 minutes.
wait_exit "$DECODE_PID" 30
took=$(since "$t0")
log "decode exit $EXIT_CODE after $took s"
[ "$EXIT_CODE" -eq 1 ] || fail "decode exit $EXIT_CODE, wanted 1 within 30 s"
grep -q "cannot reach prefill rank at $RANK:7001" "$TMP/decode.log" ||
  fail "no 'cannot reach prefill rank at $RANK:7001' line: $(head -c 400 "$TMP/decode.log")"
exit "$FAILED"
