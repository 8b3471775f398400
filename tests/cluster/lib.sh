# Shared parts of the cluster tests: sourced, never run.
#
# A cluster test deploys real `layerstream prefill` / `layerstream decode`
# processes on test hosts (tests/cluster/hosts.sh: one network namespace per
# host, a bridge in its own namespace), each started with --config from a
# file derived from the shipped config/cluster-*.toml with only the addresses
# and the test's sizes substituted. Host 0 is the decode node, host r+1 is
# prefill CP rank r. The control plane (caf-io) and the data plane
# (libfabric tcp;ofi_rxm) cross the veths.
#
# On top of tests/process/lib.sh (deadlines, watchdog, cleanup trap, report
# checks): the hosts are made with an ID unique to this run ("p<pid>") and
# removed on every exit path, leftovers of killed runs are reaped first.
#
# Usage in a test:   source "$(dirname "$0")/lib.sh" "$@"
# $1 is the layerstream binary. Exit codes: 0 pass, 1 fail, 77 skip.

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONFIG_DIR=$(cd "$CLUSTER_DIR/../../config" && pwd)
TEST_BUDGET_S=${TEST_BUDGET_S:-150}
# ---- sizes (every one overridable from the environment) --------------------
# 8 layers, 2 heads x 64 x bf16, 16-token pages: a page of one layer's K is
# 4 KiB. The decode pool holds every room at once, so that the page layout
# depends only on the seed (pool digests of two runs are then comparable).
LAYERS=${LAYERS:-8}
HEADS=${HEADS:-2}
COMPUTE_US=${COMPUTE_US:-2000}
MLA=${MLA:-false}
PER_LAYER=${PER_LAYER:-true}
CHUNK=${CHUNK:-0}
MAX_BATCH=${MAX_BATCH:-4}
ROOMS=${ROOMS:-12}
MIN_TOKENS=${MIN_TOKENS:-16}
MAX_TOKENS=${MAX_TOKENS:-512}
POOL_PAGES=${POOL_PAGES:-512}
source "$CLUSTER_DIR/../process/lib.sh" "$@"
source "$CLUSTER_DIR/hosts.sh"

# Sanitizer builds (CMake passes LAYERSTREAM_SANITIZE): 3-5 instrumented
# processes per run, several runs per test, do not fit those builds' CI time;
# the same code paths run under the sanitizers in the loopback process tests.
if [ -n "${LAYERSTREAM_SANITIZE:-}" ]; then
  skip "cluster tests do not run in the '$LAYERSTREAM_SANITIZE' sanitizer build (CI time budget; tests/process covers the same paths there)"
fi
why=$(hosts_supported) || skip "no test hosts here: $why"
require_provider "tcp;ofi_rxm"

HOSTS_ID="p$$"
hosts_reap
CLEANUP_HOOKS+=(cluster_down)
cluster_down() {
  hosts_down || log "WARNING: test hosts of $HOSTS_ID left behind: $(hosts_namespaces | xargs)"
}

# Each host has one interface besides lo: the IP providers use it.
export FI_TCP_IFACE=veth0 FI_NET_IFACE=veth0 FI_SOCKETS_IFACE=veth0

DECODE_POOL_PAGES=${DECODE_POOL_PAGES:-$((ROOMS * ((MAX_TOKENS + 15) / 16)))}
BASE_PORT=7001 # the shipped files' ports: rank r listens on 7001 + r (its own host)

decode_host() { echo 0; }
prefill_host() { echo $(($1 + 1)); }

# cluster_up: CP prefill hosts and the decode host.
cluster_up() {
  local t
  t=$(now)
  hosts_up $((CP + 1)) || die "could not make $((CP + 1)) test hosts"
  log "test hosts $HOSTS_ID: $((CP + 1)) up in $(since "$t") s (decode on $(host_ip 0), prefill ranks on $(host_ip 1)..$(host_ip "$CP"))"
}

common_overrides() {
  echo "model.layers=$LAYERS" "model.kv_heads=$HEADS" "model.head_dim=64" \
    "model.mla=$MLA" "model.layer_compute_us=$COMPUTE_US" \
    "transfer.per_layer=$PER_LAYER" "transfer.chunk_tokens=$CHUNK" "transfer.max_batch=$MAX_BATCH" \
    "timeouts.submit_ms=$SUBMIT_MS" "timeouts.room_ms=$ROOM_MS" \
    "timeouts.heartbeat_ms=$HEARTBEAT_MS" "timeouts.connection_ms=$CONNECTION_MS" \
    "cluster.cp_size=$CP" "workload.max_tokens=$MAX_TOKENS"
}

# write_cluster_configs: $TMP/prefill-R.toml for every rank and $TMP/decode.toml,
# from the shipped cluster files (ranks above 1 from cluster-prefill-1.toml).
write_cluster_configs() {
  local r src list="" ip
  # shellcheck disable=SC2046
  for ((r = 0; r < CP; r++)); do
    src="$CONFIG_DIR/cluster-prefill-$((r < 1 ? 0 : 1)).toml"
    ip=$(host_ip "$(prefill_host "$r")")
    "$PY" "$CLUSTER_DIR/derive_config.py" "$src" "$TMP/prefill-$r.toml" \
      "prefill.host=\"$ip\"" "fabric.bind_address=\"$ip\"" "prefill.port=$((BASE_PORT + r))" \
      "prefill.cp_rank=$r" "prefill.pool_pages=$POOL_PAGES" $(common_overrides) ||
      die "cannot derive the rank $r config from $src"
    list+="${list:+, }\"$ip:$((BASE_PORT + r))\""
  done
  ip=$(host_ip "$(decode_host)")
  # shellcheck disable=SC2046
  "$PY" "$CLUSTER_DIR/derive_config.py" "$CONFIG_DIR/cluster-decode.toml" "$TMP/decode.toml" \
    "fabric.bind_address=\"$ip\"" "decode.prefill=[$list]" "decode.pool_pages=$DECODE_POOL_PAGES" \
    "workload.rooms=$ROOMS" "workload.min_tokens=$MIN_TOKENS" "workload.seed=$SEED" \
    "workload.fragmentation=$FRAG" $(common_overrides) ||
    die "cannot derive the decode config"
}

# start_cluster_prefill RANK [LOG_LEVEL]: rank RANK on its host; waits
# (bounded) until it listens. Sets PF_PIDS[RANK]. Log: $TMP/prefill-RANK.log.
PF_PIDS=()
start_cluster_prefill() {
  local rank=$1 level=${2:-info} logf="$TMP/prefill-$1.log" pid
  on_host_exec "$(prefill_host "$rank")" "$BIN" prefill --config "$TMP/prefill-$rank.toml" \
    --log-level "$level" >"$logf" 2>&1 &
  pid=$!
  started "$pid"
  PF_PIDS[$rank]=$pid
  wait_for_log "$logf" "listening on" 15 || {
    kill -0 "$pid" 2>/dev/null && die "prefill rank $rank did not listen within 15 s"
    die "prefill rank $rank exited at start: $(tail -n 3 "$logf")"
  }
  log "prefill rank $rank: pid $pid on $(host_ns "$(prefill_host "$rank")") ($(grep -o 'listening on .*' "$logf"))"
}

start_cluster_prefills() {
  local r
  for ((r = 0; r < CP; r++)); do start_cluster_prefill "$r" "${1:-info}"; done
}

# start_cluster_decode NAME: the decode node on host 0 with $TMP/decode.toml;
# pid in DECODE_PID, log $TMP/NAME.log, report $TMP/NAME.json.
start_cluster_decode() {
  local name=$1 level=${DECODE_LOG_LEVEL:-info}
  rm -f "$TMP/$name.json"
  on_host_exec "$(decode_host)" "$BIN" decode --config "$TMP/decode.toml" --pool-digest --json "$TMP/$name.json" \
    --log-level "$level" >"$TMP/$name.log" 2>&1 &
  DECODE_PID=$!
  started "$DECODE_PID"
  log "$name: pid $DECODE_PID on $(host_ns "$(decode_host)") (seed $SEED, $ROOMS rooms, cp $CP, mla $MLA, per_layer $PER_LAYER, chunk $CHUNK, fragmentation $FRAG)"
}

# stop_cluster_prefills: SIGTERM to every rank still running; each must exit 0
# within 10 s and print its stats line (kept in PF_STATS[rank]).
PF_STATS=()
stop_cluster_prefills() {
  local r
  for ((r = 0; r < CP; r++)); do
    [ -n "${PF_PIDS[$r]:-}" ] || continue
    stop_prefill "${PF_PIDS[$r]}" "$r"
    PF_PIDS[$r]=""
    PF_STATS[$r]=$(grep -o "rank $r: .* exposed tail.*" "$TMP/prefill-$r.log" | tail -n 1)
  done
}

# veth_bytes HOST rx|tx: the byte counter of that host's veth0.
veth_bytes() {
  on_host "$1" cat "/sys/class/net/veth0/statistics/$2_bytes"
}

# json_get FILE KEY: one field of a report.
json_get() {
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# tail_of RANK: the median exposed tail (ms) in rank RANK's stats line.
tail_of() {
  grep -o "rank $1: .*exposed tail (median) [0-9.e+-]* ms" "$TMP/prefill-$1.log" | tail -n 1 |
    sed -E 's/.*exposed tail \(median\) ([0-9.e+-]*) ms/\1/'
}

# ---- rate-limited links (rate.sh, bench_hosts.sh) -----------------------------
# matched_rate: the tbf rate, in whole mbit, at which one layer of one forward
# batch crosses the decode host's link in one layer's compute time. That link
# is the narrowest point: every rank's slice of every room lands there, so one
# layer of a batch is, over all ranks,
#   MAX_BATCH rooms x pages(MAX_TOKENS) x page_size x HEADS x 64 x 2 B (bf16) x 2 (K and V; MLA: 1)
# bytes, and bits / COMPUTE_US = Mbit/s. (Rooms of MAX_TOKENS tokens; TCP/IP
# and ofi_rxm headers add a few percent, so a layer takes slightly longer.)
matched_rate() {
  local buffers=2 pages=$(((MAX_TOKENS + 15) / 16))
  [ "$MLA" = true ] && buffers=1
  echo "$(((MAX_BATCH * pages * 16 * HEADS * 64 * 2 * buffers * 8 + COMPUTE_US / 2) / COMPUTE_US))mbit"
}

# tail_run NAME: one cluster run (configs, ranks, decode, SIGTERM) of the
# current settings; fails unless every room completes bit-exactly. Sets
# RUN_TAIL (the slowest rank's median exposed tail, ms: a room is done when
# its last rank is) and RUN_TAILS (every rank's), from the ranks' stats lines.
tail_run() {
  local name=$1 t r x
  write_cluster_configs
  start_cluster_prefills
  t=$(now)
  start_cluster_decode "$name"
  wait_exit "$DECODE_PID" 60
  log "$name: decode exit $EXIT_CODE after $(since "$t") s"
  [ "$EXIT_CODE" -eq 0 ] || fail "$name: decode exited $EXIT_CODE, expected 0"
  json_check "$TMP/$name.json" "$ALL_EXACT and r['cp'] == $CP" ||
    fail "$name: not every room complete and bit-exact"
  stop_cluster_prefills
  RUN_TAIL=0
  RUN_TAILS=()
  for ((r = 0; r < CP; r++)); do
    x=$(tail_of "$r")
    [ -n "$x" ] || { fail "$name: rank $r printed no exposed tail at exit"; x=0; }
    RUN_TAILS[$r]=$x
    le "$x" "$RUN_TAIL" || RUN_TAIL=$x
  done
  log "$name: exposed tail (median per batch) per rank: ${RUN_TAILS[*]} ms"
  cp "$TMP/$name.log" "$TMP/$name.kept" # lib.sh prints *.log tails on failure only
}

# tail_figures LAYER_MS BULK_MS: "T/L Z ms, ratios ..." as bench tail defines
# them: T = the bulk tail (the whole transfer starts at the forward's end),
# T/L its share per layer, tail_layer/(T/L) and tail_layer/tail_bulk.
tail_figures() {
  awk -v l="$1" -v b="$2" -v n="$LAYERS" 'BEGIN {
    tl = b / n
    printf "T/L %.2f ms, ratios tail_layer/(T/L) %.2f, tail_layer/tail_bulk %.3f", tl, (tl > 0 ? l / tl : 0), (b > 0 ? l / b : 0) }'
}
