#!/usr/bin/env bash
# A decode process SIGKILLed mid-transfer: the prefill process stays up, logs
# every room of that decode as settled (failed, or complete if it finished
# before the kill) within timeouts.room_ms, and a NEW decode process started
# against the same prefill completes all its rooms bit-exactly.
# Usage: decode_killed.sh LAYERSTREAM
COMPUTE_US=${COMPUTE_US:-250000}  # 4 layers x 250 ms: a batch's forward takes 1 s
MAX_BATCH=2
ROOMS=6
MIN_TOKENS=64
SUBMIT_MS=2000
ROOM_MS=8000
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
start_prefill 0 PF_PID PF_PORT debug
PF_LOG=$TMP/prefill-0.log
start_decode decode1 "$PF_PORT"
# Rooms are in flight once the prefill set up its first batch; kill mid-forward.
wait_for_log "$PF_LOG" "manager: setup of" 20 || die "prefill never started a batch"
sleep 0.4
kill -KILL "$DECODE_PID"
t_kill=$(now)
wait "$DECODE_PID" 2>/dev/null
reaped "$DECODE_PID"
log "decode1 killed (SIGKILL) mid-room"

expect_prefill_settles "$t_kill" killed

# Restart + reconnect: a fresh decode (same room ids) against the same prefill.
expect_fresh_decode_completes
stop_prefill "$PF_PID" 0
exit $FAILED
