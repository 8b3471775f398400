#!/usr/bin/env bash
# A prefill process SIGKILLed mid-room (CP = 2, rank 1 killed): the decode
# process exits non-zero within timeouts.room_ms + a margin, its report and
# log name the lost rank, it never reports a room complete that was not
# bit-exact, and the surviving prefill rank 0 stays up.
# Usage: prefill_killed.sh LAYERSTREAM
CP=2
COMPUTE_US=${COMPUTE_US:-250000}  # 4 layers x 250 ms: a batch's forward takes 1 s
MAX_BATCH=2
ROOMS=6
MIN_TOKENS=64
SUBMIT_MS=2000
ROOM_MS=8000
MARGIN_S=5
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
start_prefill 0 PF0_PID PF0_PORT debug
start_prefill 1 PF1_PID PF1_PORT debug
start_decode decode "$PF0_PORT" "$PF1_PORT"
wait_for_log "$TMP/prefill-1.log" "manager: setup of" 20 || die "prefill rank 1 never started a batch"
sleep 0.4
kill -KILL "$PF1_PID"
t_kill=$(now)
wait "$PF1_PID" 2>/dev/null
reaped "$PF1_PID"
log "prefill rank 1 killed (SIGKILL) mid-room"

wait_exit "$DECODE_PID" $((ROOM_MS / 1000 + MARGIN_S))
took=$(since "$t_kill")
if [ "$EXIT_CODE" -eq 124 ]; then
  fail "decode did not exit within room_ms + ${MARGIN_S} s after the kill"
else
  log "decode exit $EXIT_CODE $took s after the kill (room_ms $ROOM_MS)"
  [ "$EXIT_CODE" -eq 1 ] || fail "decode exited $EXIT_CODE, expected 1: prefill rank 1 was killed mid-room"
fi
json_check "$TMP/decode.json" \
  'r["failed"] >= 1 and r["complete"] + r["failed"] == r["rooms"] and (r["complete"] == 0 or r["bit_exact"]) and any("prefill rank 1" in f for f in r["failures"])' ||
  fail "the report does not name the lost rank, or counts a room complete that is not bit-exact"
grep -q "prefill rank 1 lost" "$TMP/decode.log" || fail "decode's log does not say prefill rank 1 was lost"
grep -E "failed: " "$TMP/decode.log" | head -n 3 | sed 's/^/    /'
check_no_false_complete "$TMP/decode.log"
kill -0 "$PF0_PID" 2>/dev/null || fail "the surviving prefill rank 0 died"
stop_prefill "$PF0_PID" 0
exit $FAILED
