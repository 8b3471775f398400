#!/usr/bin/env bash
# Control-plane authentication with real processes: a decode with the wrong
# cluster token is refused (clear reason in both logs, no room opened, decode
# exits 1 at once), then a decode with the right token completes every room
# bit-exactly against the same prefill.
# Usage: auth.sh LAYERSTREAM
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
start_prefill 0 PF_PID PF_PORT
PF_LOG=$TMP/prefill-0.log

DECODE_TOKEN=not-the-cluster-token-$RANDOM
t=$(now)
start_decode wrong "$PF_PORT"
wait_exit "$DECODE_PID" 20
log "wrong-token decode: exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 1 ] || fail "the wrong-token decode exited $EXIT_CODE, expected 1"
grep -E "unauthorized: .*did not prove the cluster token.*wrong token" "$TMP/wrong.log" | sed 's/^/    /' | grep -q . ||
  fail "the wrong-token decode did not log why it was refused"
wait_for_log "$PF_LOG" "refused peer .*: wrong token" 5 ||
  fail "the prefill did not log the refused peer"
grep -E "refused peer" "$PF_LOG" | sed 's/^/    /'
grep -q "authenticated" "$PF_LOG" && fail "the prefill authenticated the wrong-token peer"
grep -Eq "receiver: room|TEST HOOK" "$TMP/wrong.log" && fail "the wrong-token decode opened rooms"
[ -z "$(settled_rooms "$PF_LOG" 0)" ] || fail "the prefill handled rooms of a refused peer"

DECODE_TOKEN=$TOKEN
t=$(now)
start_decode right "$PF_PORT"
wait_exit "$DECODE_PID" 40
log "right-token decode: exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "the right-token decode exited $EXIT_CODE, expected 0"
json_check "$TMP/right.json" "$ALL_EXACT" || fail "rooms not all complete and bit-exact"
grep -q "control plane rank 0: peer .* authenticated" "$PF_LOG" || fail "the prefill did not log the authentication"
check_no_false_complete "$TMP/right.log"
stop_prefill "$PF_PID" 0
exit $FAILED
