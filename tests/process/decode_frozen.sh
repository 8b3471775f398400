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

expect_prefill_settles "$t_stop" froze

# The prefill is still healthy: a fresh decode (same room ids) completes.
expect_fresh_decode_completes

kill -0 "$FROZEN_PID" 2>/dev/null || fail "the frozen decode vanished"
kill -KILL "$FROZEN_PID"
wait "$FROZEN_PID" 2>/dev/null
reaped "$FROZEN_PID"
log "decode1 killed (SIGKILL) while frozen"
stop_prefill "$PF_PID" 0
exit $FAILED
