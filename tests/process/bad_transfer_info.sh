#!/usr/bin/env bash
# A room whose transfer_info is corrupted (the TESTING-ONLY config key
# workload.corrupt_rooms moves its dst_k_ptrs[0] past the end of the decode's
# advertised region) among good rooms: exactly that room fails, with the
# reason logged on both sides, and every other room completes bit-exactly
# (the receiver checks every byte of each good room, so a stray write into
# another room's pages would fail that room). The decode exits 1 by design
# here, so the JSON report is what is checked.
# Usage: bad_transfer_info.sh LAYERSTREAM [PROVIDER]   (exit 77: provider missing)
PROVIDER=${2:-tcp;ofi_rxm}
ROOMS=8
BAD_ROOM=3
CORRUPT_ROOMS=$BAD_ROOM
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
start_prefill 0 PF_PID PF_PORT
t=$(now)
start_decode decode "$PF_PORT"
wait_exit "$DECODE_PID" 40
log "decode exit $EXIT_CODE after $(since "$t") s (1 expected: one room fails by design)"
[ "$EXIT_CODE" -ne 124 ] || fail "decode did not exit within 40 s"
[ "$EXIT_CODE" -eq 1 ] || fail "decode exited $EXIT_CODE, expected 1 (one room failed)"
json_check "$TMP/decode.json" \
  "r['rooms'] == $ROOMS and r['complete'] == $ROOMS - 1 and r['failed'] == 1 and r['bit_exact'] and len(r['failures']) == 1 and r['failures'][0].startswith('room $BAD_ROOM:')" ||
  fail "expected exactly room $BAD_ROOM failed and every other room bit-exact"
grep -q "room $BAD_ROOM: TEST HOOK workload.corrupt_rooms" "$TMP/decode.log" ||
  fail "decode did not log the test hook for room $BAD_ROOM"
grep -E "receiver: room $BAD_ROOM failed: .+" "$TMP/decode.log" | sed 's/^/    /' | grep . ||
  fail "decode logged no reason for room $BAD_ROOM"
grep -E "rank 0: room $BAD_ROOM (failed|refused): .+" "$TMP/prefill-0.log" | sed 's/^/    /' | grep . ||
  fail "prefill logged no reason for room $BAD_ROOM"
n=$(grep -c "receiver: room [0-9]* complete: .*bit-exact" "$TMP/decode.log")
[ "$n" -eq $((ROOMS - 1)) ] || fail "decode logged $n rooms complete bit-exact, expected $((ROOMS - 1))"
check_no_false_complete "$TMP/decode.log"
stop_prefill "$PF_PID" 0
exit $FAILED
