#!/usr/bin/env bash
# Crashes across hosts (CP = 2; host 0 decode, hosts 1-2 prefill ranks 0-1):
#   1. prefill rank 1 SIGKILLed mid-room: the decode exits non-zero within
#      timeouts.room_ms (+ a margin), its report names the lost rank, it
#      reports no room complete that was not bit-exact; rank 0 stays up and
#      settles those rooms.
#   2. rank 1 restarted; a decode SIGKILLed mid-room: both ranks settle that
#      decode's rooms within room_ms (some failed) and stay up.
#   3. a new decode re-registers (authenticates with both ranks) and completes
#      every room bit-exactly. Both ranks then exit 0 on SIGTERM, their stats
#      lines counting failed rooms.
# Usage: crash.sh LAYERSTREAM
CP=2
LAYERS=8
COMPUTE_US=${COMPUTE_US:-100000} # 8 layers x 100 ms: a batch's forward takes 0.8 s
MAX_BATCH=2
ROOMS=6
MIN_TOKENS=64
SUBMIT_MS=2000
ROOM_MS=8000
HEARTBEAT_MS=200
CONNECTION_MS=1500
MARGIN_S=3
FRAG=0.3
TEST_BUDGET_S=${TEST_BUDGET_S:-110}
source "$(dirname "$0")/lib.sh" "$@"

# settled_since LOG OFFSET RANK [failed]: distinct room ids rank RANK logged
# as settled (or only failed) after byte OFFSET of LOG.
settled_since() {
  local what="complete|failed|refused"
  [ "${4:-}" = failed ] && what="failed|refused"
  tail -c +$(($2 + 1)) "$1" | grep -Eo "rank $3: room [0-9]+ ($what)" | awk '{print $4}' | sort -n | uniq
}
# wait_settled_since LOG OFFSET RANK N SECONDS
wait_settled_since() {
  local deadline=$((SECONDS + $5 + 1))
  until [ "$(settled_since "$1" "$2" "$3" | wc -l)" -ge "$4" ]; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.05
  done
}
log_size() { stat -c %s "$1"; }

cluster_up
write_cluster_configs
start_cluster_prefills debug

# ---- 1. a prefill rank killed ----------------------------------------------
start_cluster_decode decode1
wait_for_log "$TMP/prefill-1.log" "manager: setup of" 20 || die "prefill rank 1 never started a batch"
sleep 0.4
kill -KILL "${PF_PIDS[1]}"
t_kill=$(now)
wait "${PF_PIDS[1]}" 2>/dev/null
reaped "${PF_PIDS[1]}"
PF_PIDS[1]=""
log "prefill rank 1 killed (SIGKILL) mid-room"
wait_exit "$DECODE_PID" $((ROOM_MS / 1000 + MARGIN_S))
if [ "$EXIT_CODE" -eq 124 ]; then
  fail "decode1 did not exit within room_ms + $MARGIN_S s after rank 1 was killed"
else
  log "decode1 exit $EXIT_CODE $(since "$t_kill") s after the kill (room_ms $ROOM_MS, connection_ms $CONNECTION_MS)"
  [ "$EXIT_CODE" -eq 1 ] || fail "decode1 exited $EXIT_CODE, expected 1: prefill rank 1 was killed mid-room"
fi
json_check "$TMP/decode1.json" \
  'r["failed"] >= 1 and r["complete"] + r["failed"] == r["rooms"] and (r["complete"] == 0 or r["bit_exact"]) and r["failures"] and all("prefill rank 1" in f and "no answer" not in f for f in r["failures"])' ||
  fail "decode1's report does not give every failed room a reason naming the lost rank"
grep -q "prefill rank 1 lost" "$TMP/decode1.log" || fail "decode1's log does not say prefill rank 1 was lost"
grep -E "failed: " "$TMP/decode1.log" | head -n 2 | sed 's/^/    /'
check_no_false_complete "$TMP/decode1.log"
kill -0 "${PF_PIDS[0]}" 2>/dev/null || die "the surviving prefill rank 0 died"
if wait_settled_since "$TMP/prefill-0.log" 0 0 "$ROOMS" $((ROOM_MS / 1000)); then
  log "rank 0 settled all $ROOMS rooms of decode1 $(since "$t_kill") s after the kill"
else
  fail "rank 0 settled only rooms [$(settled_since "$TMP/prefill-0.log" 0 0 | xargs)] of decode1's 1..$ROOMS within room_ms"
fi

# ---- 2. the decode killed ----------------------------------------------------
# Rank 1 restarted at once on its configured port, which its killed
# predecessor's connections still hold in TIME_WAIT (the rank binds with
# SO_REUSEADDR); a second process on a port that a live rank listens on is
# still refused.
mv "$TMP/prefill-1.log" "$TMP/prefill-1-killed.kept"
start_cluster_prefill 1 debug
LS_HOSTS_ID=$HOSTS_ID timeout 20 bash "$HOSTS_SH" exec "$(prefill_host 0)" "$BIN" prefill \
  --config "$TMP/prefill-0.toml" >"$TMP/second-rank-0.out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || ! grep -q "cannot publish" "$TMP/second-rank-0.out"; then
  fail "a second rank 0 on the port rank 0 listens on was not refused (exit $rc): $(tail -n 2 "$TMP/second-rank-0.out")"
else
  log "a second rank 0 on a live rank's port: refused ($(grep -o 'cannot publish.*' "$TMP/second-rank-0.out" | cut -c 1-100))"
fi
off0=$(log_size "$TMP/prefill-0.log")
start_cluster_decode decode2
wait_for_log "$TMP/prefill-1.log" "manager: setup of" 20 || die "restarted rank 1 never started a batch"
sleep 0.4
kill -KILL "$DECODE_PID"
t_kill=$(now)
wait "$DECODE_PID" 2>/dev/null
reaped "$DECODE_PID"
log "decode2 killed (SIGKILL) mid-room"
for r in 0 1; do
  off=0
  [ "$r" -eq 0 ] && off=$off0
  if wait_settled_since "$TMP/prefill-$r.log" "$off" "$r" "$ROOMS" $((ROOM_MS / 1000)); then
    log "rank $r settled all $ROOMS rooms of decode2 $(since "$t_kill") s after the kill (room_ms $ROOM_MS)"
  else
    fail "rank $r settled only rooms [$(settled_since "$TMP/prefill-$r.log" "$off" "$r" | xargs)] of decode2's 1..$ROOMS within room_ms"
  fi
  failed=$(settled_since "$TMP/prefill-$r.log" "$off" "$r" failed | xargs)
  [ -n "$failed" ] || fail "rank $r logged none of decode2's rooms failed"
  log "rank $r: decode2's rooms failed: [$failed]"
  tail -c +$((off + 1)) "$TMP/prefill-$r.log" | grep -E "rank $r: room [0-9]+ failed" | head -n 1 | sed 's/^/    /'
  kill -0 "${PF_PIDS[$r]}" 2>/dev/null || die "prefill rank $r died after the decode was killed"
done

# ---- 3. a new decode -----------------------------------------------------------
ROOMS=4
SEED=$((SEED + 1))
write_cluster_configs
t=$(now)
start_cluster_decode decode3
wait_exit "$DECODE_PID" 40
log "decode3 exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "the new decode exited $EXIT_CODE, expected 0"
json_check "$TMP/decode3.json" "$ALL_EXACT and r['cp'] == $CP" || fail "the new decode's rooms are not all bit-exact"
n=$(grep -c "authenticated with prefill rank" "$TMP/decode3.log")
[ "$n" -eq "$CP" ] || fail "the new decode authenticated with $n ranks, expected $CP"
stop_cluster_prefills
for ((r = 0; r < CP; r++)); do
  log "rank $r stats: ${PF_STATS[$r]:-<none>}"
  nfailed=$(echo "${PF_STATS[$r]:-}" | grep -Eo "[0-9]+ failed" | awk '{print $1}')
  [ "${nfailed:-0}" -gt 0 ] || fail "rank $r's stats line counts no failed room"
done
exit $FAILED
