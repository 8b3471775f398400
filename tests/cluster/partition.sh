#!/usr/bin/env bash
# A partition: the link of a prefill host goes down (ip link set ... down on
# the bridge end of its cable) while its rooms are in flight, and comes back.
#
# Layout (chosen so that "other rooms" exist: with CP = 2 every room needs
# every rank): two independent CP = 1 clusters that share the decode host.
#   cluster A: prefill on host 1  -> decode A on host 0
#   cluster B: prefill on host 2  -> decode B on host 0
# Both workloads run at once; host 2's link goes down once B's prefill has
# set up its first batch. Then:
#   - decode B exits non-zero within timeouts.room_ms (+ a margin) of the
#     link going down, and its report gives every failed room a reason that
#     names prefill rank 0;
#   - decode A, in flight throughout, completes every room bit-exactly;
#   - B's prefill settles decode B's rooms (failed) and stays up;
#   - with the link up again a new decode B completes bit-exactly;
#   - both prefills exit 0 on SIGTERM, B's stats count failed rooms.
# Short timeouts in the derived configs: submit 2 s, room 6 s, heartbeat
# 0.2 s, connection 1.5 s.
# Usage: partition.sh LAYERSTREAM
CP=1
LAYERS=8
COMPUTE_US=${COMPUTE_US:-100000} # 8 layers x 100 ms: a batch's forward takes 0.8 s
MAX_BATCH=2
MIN_TOKENS=64
SUBMIT_MS=2000
ROOM_MS=6000
HEARTBEAT_MS=200
CONNECTION_MS=1500
MARGIN_S=3
FRAG=0.3
TEST_BUDGET_S=${TEST_BUDGET_S:-110}
source "$(dirname "$0")/lib.sh" "$@"
ROOMS_A=8 # 4 batches: about 3.5 s, longer than B's part before the partition
ROOMS_B=4

# pair_configs X HOST ROOMS SEED: $TMP/prefill-X.toml (the single rank of
# cluster X, on HOST) and $TMP/decode-X.toml (its decode, on host 0).
pair_configs() {
  local x=$1 ip
  ip=$(host_ip "$2")
  # shellcheck disable=SC2046
  "$PY" "$CLUSTER_DIR/derive_config.py" "$CONFIG_DIR/cluster-prefill-0.toml" "$TMP/prefill-$x.toml" \
    "prefill.host=\"$ip\"" "fabric.bind_address=\"$ip\"" "prefill.port=$BASE_PORT" \
    "prefill.cp_rank=0" "prefill.pool_pages=$POOL_PAGES" $(common_overrides) ||
    die "cannot derive cluster $x's prefill config"
  # shellcheck disable=SC2046
  "$PY" "$CLUSTER_DIR/derive_config.py" "$CONFIG_DIR/cluster-decode.toml" "$TMP/decode-$x.toml" \
    "fabric.bind_address=\"$(host_ip 0)\"" "decode.prefill=[\"$ip:$BASE_PORT\"]" \
    "decode.pool_pages=$((ROOMS_A * ((MAX_TOKENS + 15) / 16)))" \
    "workload.rooms=$3" "workload.min_tokens=$MIN_TOKENS" "workload.seed=$4" \
    "workload.fragmentation=$FRAG" $(common_overrides) ||
    die "cannot derive cluster $x's decode config"
}

# start_pair_prefill X HOST: sets PF_X; log $TMP/prefill-X.log.
start_pair_prefill() {
  local x=$1 logf="$TMP/prefill-$1.log" pid
  on_host_exec "$2" "$BIN" prefill --config "$TMP/prefill-$x.toml" --log-level debug >"$logf" 2>&1 &
  pid=$!
  started "$pid"
  printf -v "PF_$x" '%s' "$pid"
  wait_for_log "$logf" "listening on" 15 || die "cluster $x's prefill did not listen within 15 s: $(tail -n 3 "$logf")"
  log "cluster $x prefill: pid $pid on $(host_ns "$2") ($(grep -o 'listening on .*' "$logf"))"
}

# start_pair_decode X NAME: sets DEC_X; log $TMP/NAME.log, report $TMP/NAME.json.
start_pair_decode() {
  local x=$1 name=$2 pid
  rm -f "$TMP/$name.json"
  on_host_exec 0 "$BIN" decode --config "$TMP/decode-$x.toml" --pool-digest --json "$TMP/$name.json" \
    --log-level info >"$TMP/$name.log" 2>&1 &
  pid=$!
  started "$pid"
  printf -v "DEC_$x" '%s' "$pid"
  log "$name: pid $pid on $(host_ns 0), against cluster $x"
}

cluster_up_n() { hosts_up 3 || die "could not make 3 test hosts"; }
cluster_up_n
log "test hosts $HOSTS_ID: decode host $(host_ip 0), cluster A's prefill $(host_ip 1), cluster B's $(host_ip 2)"
pair_configs A 1 "$ROOMS_A" "$SEED"
pair_configs B 2 "$ROOMS_B" $((SEED + 1))
start_pair_prefill A 1
start_pair_prefill B 2

start_pair_decode A decode-A
start_pair_decode B decode-B
wait_for_log "$TMP/prefill-B.log" "manager: setup of" 20 || die "cluster B's prefill never started a batch"
sleep 0.3
host_link 2 down || die "cannot take host 2's link down"
t_down=$(now)
log "host 2's link DOWN (cluster B's rooms in flight)"

# Decode B: its rooms fail, with a reason, within room_ms.
wait_exit "$DEC_B" $((ROOM_MS / 1000 + MARGIN_S))
took_b=$(since "$t_down")
if [ "$EXIT_CODE" -eq 124 ]; then
  fail "decode B did not exit within room_ms + $MARGIN_S s of the partition"
else
  log "decode B exit $EXIT_CODE $took_b s after the link went down (room_ms $ROOM_MS, connection_ms $CONNECTION_MS)"
  [ "$EXIT_CODE" -eq 1 ] || fail "decode B exited $EXIT_CODE, expected 1: its prefill host was cut off mid-room"
fi
json_check "$TMP/decode-B.json" \
  'r["failed"] >= 1 and r["complete"] + r["failed"] == r["rooms"] and (r["complete"] == 0 or r["bit_exact"]) and r["failures"] and all("prefill rank 0" in f and "no answer" not in f for f in r["failures"])' ||
  fail "decode B's report gives a failed room no reason naming the cut-off rank"
grep -E "failed: " "$TMP/decode-B.log" | head -n 3 | sed 's/^/    /'
check_no_false_complete "$TMP/decode-B.log"

# Decode A: untouched by the partition, in flight through it.
wait_exit "$DEC_A" 30
took_a=$(since "$t_down")
log "decode A exit $EXIT_CODE $took_a s after the link went down"
[ "$EXIT_CODE" -eq 0 ] || fail "decode A exited $EXIT_CODE: cluster A's rooms were affected by host 2's partition"
json_check "$TMP/decode-A.json" "$ALL_EXACT" || fail "cluster A's rooms are not all complete and bit-exact"
le "$took_b" "$took_a" || fail "decode A finished before decode B failed: A was not in flight through the partition"

# Cluster B's prefill settles decode B's rooms and stays up.
if wait_settled "$TMP/prefill-B.log" 0 "$ROOMS_B" $((ROOM_MS / 1000 + MARGIN_S)); then
  log "cluster B's prefill settled all $ROOMS_B rooms $(since "$t_down") s after the link went down"
else
  fail "cluster B's prefill settled only rooms [$(settled_rooms "$TMP/prefill-B.log" 0 | xargs)] of 1..$ROOMS_B within room_ms + $MARGIN_S s"
fi
[ -n "$(failed_rooms "$TMP/prefill-B.log" 0)" ] || fail "cluster B's prefill logged no room failed"
grep -E "rank 0: room [0-9]+ failed" "$TMP/prefill-B.log" | head -n 2 | sed 's/^/    /'
kill -0 "$PF_B" 2>/dev/null || die "cluster B's prefill died during the partition"

# The link back: a new decode B completes.
host_link 2 up || die "cannot bring host 2's link up"
log "host 2's link UP"
t=$(now)
start_pair_decode B decode-B2
wait_exit "$DEC_B" 40
log "decode-B2 exit $EXIT_CODE after $(since "$t") s"
[ "$EXIT_CODE" -eq 0 ] || fail "after the link came back, a new decode B exited $EXIT_CODE, expected 0"
json_check "$TMP/decode-B2.json" "$ALL_EXACT" || fail "after the link came back, decode B's rooms are not all bit-exact"

for x in A B; do
  pid_var=PF_$x
  stop_prefill "${!pid_var}" "0 of cluster $x"
  grep -o "rank 0: .* exposed tail.*" "$TMP/prefill-$x.log" | tail -n 1 | sed "s/^/    cluster $x: /"
done
nfailed=$(grep -Eo "rank 0: [0-9]+ rooms complete, [0-9]+ failed" "$TMP/prefill-B.log" | tail -n 1 | awk '{print $6}')
[ "${nfailed:-0}" -gt 0 ] || fail "cluster B's prefill stats count no failed room"
exit $FAILED
