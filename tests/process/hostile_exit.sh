#!/usr/bin/env bash
# A peer without the cluster token sends the prefill rank's gate an exit
# over the control plane (tests/process/hostile_peer.cpp):
#   1. an ordinary exit (user_shutdown): the gate logs and ignores it, and a
#      decode with the token then completes every room bit-exactly;
#   2. exit_reason::kill, which CAF applies before any handler: the gate is
#      gone, and the prefill process exits 1 saying so (a supervisor can
#      restart it) instead of living on unable to serve.
# Usage: hostile_exit.sh LAYERSTREAM HOSTILE_PEER
source "$(dirname "$0")/lib.sh" "$@"
PEER=${2:?usage: hostile_exit.sh LAYERSTREAM HOSTILE_PEER}

require_provider "$PROVIDER"
start_prefill 0 PF_PID PF_PORT
PF_LOG=$TMP/prefill-0.log

timeout 20 "$PEER" "$PF_PORT" exit >"$TMP/peer-exit.log" 2>&1
rc=$?
sed 's/^/    /' "$TMP/peer-exit.log"
[ "$rc" -eq 0 ] || fail "after an exit from a peer without the token the gate did not answer (peer exit $rc)"
wait_for_log "$PF_LOG" "ignored an exit for the gate" 5 || fail "the prefill did not log the ignored exit"
grep -E "ignored an exit" "$PF_LOG" | sed 's/^/    /'

t=$(now)
start_decode right "$PF_PORT"
wait_exit "$DECODE_PID" 40
log "decode after the ignored exit: exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "the decode exited $EXIT_CODE, expected 0"
json_check "$TMP/right.json" "$ALL_EXACT" || fail "rooms not all complete and bit-exact"

timeout 20 "$PEER" "$PF_PORT" kill >"$TMP/peer-kill.log" 2>&1
rc=$?
sed 's/^/    /' "$TMP/peer-kill.log"
[ "$rc" -eq 0 ] || fail "the peer could not send the kill (exit $rc)"
t=$(now)
wait_exit "$PF_PID" 20
log "prefill after the kill: exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 1 ] || fail "the prefill whose gate was killed exited $EXIT_CODE, expected 1"
grep -q "the gate is down" "$PF_LOG" || fail "the prefill did not say its gate is down"
grep -E "the gate is down" "$PF_LOG" | sed 's/^/    /'
exit $FAILED
