#!/usr/bin/env bash
# A decode process FROZEN (SIGSTOP) mid-transfer: no socket closes, so only
# the timeouts can notice (delivery-complete of each write within
# timeouts.submit_ms, caf-io heartbeats within timeouts.connection_ms). The
# prefill process stays up and logs every room of that decode as settled
# (failed, or complete if it finished before the freeze) within
# timeouts.room_ms; then a NEW decode completes all its rooms bit-exactly
# against the same prefill. The frozen decode is SIGKILLed at the end.
# Usage: decode_frozen.sh LAYERSTREAM
COMPUTE_US=${COMPUTE_US:-250000}  # 4 layers x 250 ms: a batch's forward takes 1 s
MAX_BATCH=2
ROOMS=6
MIN_TOKENS=64
SUBMIT_MS=2000
ROOM_MS=8000
HEARTBEAT_MS=200
CONNECTION_MS=1000
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
start_prefill 0 PF_PID PF_PORT debug
PF_LOG=$TMP/prefill-0.log
start_decode decode1 "$PF_PORT"
FROZEN_PID=$DECODE_PID
wait_for_log "$PF_LOG" "manager: setup of" 20 || die "prefill never started a batch"
sleep 0.4
kill -STOP "$FROZEN_PID"
t_stop=$(now)
log "decode1 frozen (SIGSTOP) mid-room"

if wait_settled "$PF_LOG" 0 "$ROOMS" $((ROOM_MS / 1000)); then
  log "prefill settled all $ROOMS rooms $(since "$t_stop") s after the freeze (room_ms $ROOM_MS, submit_ms $SUBMIT_MS, connection_ms $CONNECTION_MS)"
else
  fail "prefill settled only rooms [$(settled_rooms "$PF_LOG" 0 | xargs)] of 1..$ROOMS within room_ms = $ROOM_MS ms"
fi
failed=$(failed_rooms "$PF_LOG" 0 | xargs)
[ -n "$failed" ] || fail "prefill logged no room as failed after the decode froze"
log "prefill: rooms failed: [$failed]"
grep -E "rank 0: room [0-9]+ failed" "$PF_LOG" | head -n 3 | sed 's/^/    /'
kill -0 "$PF_PID" 2>/dev/null || die "prefill died after its decode froze"

# The prefill is still healthy: a fresh decode (same room ids) completes.
ROOMS=4
SEED=$((SEED + 1))
t=$(now)
start_decode decode2 "$PF_PORT"
wait_exit "$DECODE_PID" 40
log "decode2 exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "the new decode exited $EXIT_CODE, expected 0"
json_check "$TMP/decode2.json" "$ALL_EXACT" || fail "the new decode's rooms are not all bit-exact"

kill -0 "$FROZEN_PID" 2>/dev/null || fail "the frozen decode vanished"
kill -KILL "$FROZEN_PID"
wait "$FROZEN_PID" 2>/dev/null
reaped "$FROZEN_PID"
log "decode1 killed (SIGKILL) while frozen"
stop_prefill "$PF_PID" 0
exit $FAILED
