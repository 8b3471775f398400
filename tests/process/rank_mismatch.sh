#!/usr/bin/env bash
# A prefill rank whose timeouts differ from decode's is refused at the
# handshake: decode exits 1 saying which values differ, before any room
# (with a longer room_ms on the rank, decode could give up on a rank still
# within its time and hold the room's pages until it restarts).
# The session it got ends when it exits.
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
# The decode authenticated, then exited before any room: its session on the
# prefill ends with it, not only when a later handshake pushes it out.
wait_for_log "$PF_LOG" "session of node .* closed: its decode is gone" 10 ||
  fail "the prefill kept the session of a decode that exited before its first room"
stop_prefill "$PF_PID" 0
exit $FAILED
