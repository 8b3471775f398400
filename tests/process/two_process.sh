#!/usr/bin/env bash
# One prefill process + one decode process on 127.0.0.1 over PROVIDER ($2,
# default tcp;ofi_rxm): the decode exits 0 and its JSON report says every
# room (random prompt lengths, fragmented pages) completed bit-exactly, and
# the prefill closes the decode's session once the decode has exited.
# Usage: two_process.sh LAYERSTREAM [PROVIDER]   (exit 77: provider missing)
PROVIDER=${2:-tcp;ofi_rxm}
ROOMS=${ROOMS:-12}
source "$(dirname "$0")/lib.sh" "$@"

require_provider "$PROVIDER"
if [[ "$CONTROL_HOST" == *:* ]] && ! ip -6 addr show dev lo 2>/dev/null | grep -q "inet6 $CONTROL_HOST/"; then
  skip "no $CONTROL_HOST on lo (IPv6 off here)"
fi
start_prefill 0 PF_PID PF_PORT
t=$(now)
start_decode decode "$PF_PORT"
wait_exit "$DECODE_PID" 40
log "decode exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "decode exited $EXIT_CODE, expected 0"
json_check "$TMP/decode.json" "$ALL_EXACT and r['provider'] == '$PROVIDER'" ||
  fail "report is not all rooms bit-exact"
grep -q "rooms complete, bit-exact" "$TMP/decode.log" || fail "decode's printed summary does not say bit-exact"
# The decode process is gone: the prefill's session for it ends too.
wait_for_log "$TMP/prefill-0.log" "dropped the ended session of node .*; 0 open" 30 ||
  fail "the prefill kept the session of a decode process that exited"
stop_prefill "$PF_PID" 0
exit $FAILED
