#!/usr/bin/env bash
# Two decode processes share one prefill rank at once, each with its own
# range of room ids (workload.first_room): both exit 0 with every room
# bit-exact. Decode A's rooms need more src pages than the rank's pool has
# (8 rooms of 8-16 pages, 64 pages, 0.8 s a batch of up to 4), so some wait
# for pages; decode B starts while they wait, so its rooms meet A's on the
# rank and wait behind them.
# Usage: two_decodes.sh LAYERSTREAM
ROOMS=8
MIN_TOKENS=128
PREFILL_POOL_PAGES=64
COMPUTE_US=200000
ROOM_MS=30000
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
start_prefill 0 PF_PID PF_PORT
FIRST_ROOM=1 start_decode decode-a "$PF_PORT"
A_PID=$DECODE_PID
wait_for_log "$TMP/prefill-0.log" "waits for .* src pages" 30 ||
  fail "no room of decode A waited for pages: the test did not fill the prefill pool"
FIRST_ROOM=${B_FIRST_ROOM:-1001} SEED=$((SEED + 1)) start_decode decode-b "$PF_PORT"
B_PID=$DECODE_PID
wait_for_log "$TMP/prefill-0.log" "room 100[1-8] waits for" 30 ||
  fail "no room of decode B waited for pages: its rooms did not meet A's"
for name in decode-a decode-b; do
  pid=$A_PID
  [ "$name" = decode-b ] && pid=$B_PID
  wait_exit "$pid" 60
  log "$name exit $EXIT_CODE"
  [ "$EXIT_CODE" -eq 0 ] || fail "$name exited $EXIT_CODE, expected 0: $(tail -n 3 "$TMP/$name.log")"
  json_check "$TMP/$name.json" "$ALL_EXACT" || fail "$name: not every room bit-exact"
done
stop_prefill "$PF_PID" 0
exit $FAILED
