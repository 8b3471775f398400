#!/usr/bin/env bash
# Context parallelism across processes: two prefill processes (CP = 2, ranks
# 0 and 1) write every room's pages into one decode process; every room
# completes bit-exactly and both prefill ranks shut down cleanly on SIGTERM.
# Usage: cp2.sh LAYERSTREAM
CP=2
ROOMS=${ROOMS:-10}
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
start_prefill 0 PF0_PID PF0_PORT
start_prefill 1 PF1_PID PF1_PORT
t=$(now)
start_decode decode "$PF0_PORT" "$PF1_PORT"
wait_exit "$DECODE_PID" 40
log "decode exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "decode exited $EXIT_CODE, expected 0"
json_check "$TMP/decode.json" "$ALL_EXACT and r['cp'] == 2" || fail "report is not all rooms bit-exact"
# Both ranks really served rooms ("from 2 ranks" on every completed room).
n=$(grep -c "complete: .* from 2 ranks, bit-exact" "$TMP/decode.log")
[ "$n" -eq "$ROOMS" ] || fail "decode logged $n rooms complete from 2 ranks, expected $ROOMS"
stop_prefill "$PF0_PID" 0
stop_prefill "$PF1_PID" 1
exit $FAILED
