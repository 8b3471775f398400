#!/usr/bin/env bash
# A prefill rank whose timeouts differ from decode's is refused at the
# handshake: decode exits 1 saying which values differ, before any room
# (with a longer room_ms on the rank, decode could give up on a rank still
# within its time and hold the room's pages until it restarts).
# Usage: rank_mismatch.sh LAYERSTREAM
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
ROOM_MS=8000
start_prefill 0 PF_PID PF_PORT
PF_LOG=$TMP/prefill-0.log
ROOM_MS=9000 # decode's own
start_decode mismatch "$PF_PORT"
wait_exit "$DECODE_PID" 20
log "decode with other timeouts: exit $EXIT_CODE"
[ "$EXIT_CODE" -eq 1 ] || fail "the decode exited $EXIT_CODE, expected 1"
grep -E "timeouts.room_ms / submit_ms are 8000 / $SUBMIT_MS, this decode's 9000 / $SUBMIT_MS" \
  "$TMP/mismatch.log" | sed 's/^/    /' | grep -q . || fail "the decode did not say which timeouts differ"
grep -Eq "receiver: room|TEST HOOK" "$TMP/mismatch.log" && fail "the decode opened rooms"
[ -z "$(settled_rooms "$PF_LOG" 0)" ] || fail "the prefill handled rooms"
stop_prefill "$PF_PID" 0
exit $FAILED
