# Shared helpers of the process tests: sourced, never run.
#
# Every test runs real `layerstream prefill` / `layerstream decode` processes
# on 127.0.0.1 only. It writes its configs into a private temp dir, starts
# the processes in the background, bounds every wait with a deadline and kills
# everything it started on every exit path (the EXIT trap below).
#
# Usage in a test:   source "$(dirname "$0")/lib.sh" "$@"
# $1 is the layerstream binary. Exit codes: 0 pass, 1 fail, 77 skip.

set -u
export LC_ALL=C

if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 LAYERSTREAM_BINARY [args]" >&2
  exit 2
fi
BIN=$1
TEST_NAME=$(basename "$0" .sh)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ls-process-${TEST_NAME}.XXXXXX")
CLEANUP_HOOKS=() # functions cleanup runs after killing PIDS (tests/cluster: hosts_down)
PIDS=()          # every process this test started and has not reaped yet
ALL_PIDS=()      # every process this test started (for shm leftovers)
T0=$EPOCHREALTIME

# IP providers stay on loopback.
export FI_TCP_IFACE=lo FI_NET_IFACE=lo FI_SOCKETS_IFACE=lo

now() { echo "$EPOCHREALTIME"; }
# since T: seconds since the `now` value T, with 3 decimals.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
# le A B: true when the number A <= B.
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
log() { printf '[%7ss] %s\n' "$(since "$T0")" "$*"; }

# The pyenv shim costs ~2 s a call: take the system interpreter when there is one.
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=$(command -v python3); fi

FAILED=0
fail() { log "FAIL: $*"; FAILED=1; }
die() { log "FAIL: $*"; exit 1; }
skip() { log "SKIP: $*"; exit 77; }

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  kill "$WATCHDOG_PID" 2>/dev/null
  local pid
  for pid in "${PIDS[@]}"; do
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  local hook
  for hook in "${CLEANUP_HOOKS[@]}"; do "$hook"; done
  # A killed shm process leaves its segment behind.
  for pid in "${ALL_PIDS[@]}"; do rm -f /dev/shm/"$pid":* 2>/dev/null; done
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    local f
    for f in "$TMP"/*.log; do
      [ -f "$f" ] || continue
      echo "----- tail of $(basename "$f") -----"
      tail -n 40 "$f"
    done
  fi
  rm -rf "$TMP"
  log "$TEST_NAME: exit $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 1' INT TERM

# Watchdog: every wait below is bounded, but their sum could still come close
# to ctest's TIMEOUT, and ctest's kill gives no chance to clean up. After
# TEST_BUDGET_S the script's children (the processes it started, the
# current wait) get SIGTERM and the script exits 1 through cleanup.
TEST_BUDGET_S=${TEST_BUDGET_S:-80}
(
  # Its own sleep must die with it: ctest waits until every holder of the
  # test's stdout is gone.
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  sleep "$TEST_BUDGET_S" </dev/null >/dev/null 2>&1 &
  sleeper=$!
  wait "$sleeper" || exit 0
  # The script was killed without its clean-up (SIGKILL): $$ may be another
  # process's by now. Only a watchdog whose parent is still the script acts.
  read -r _ _ _ parent _ <"/proc/$BASHPID/stat" 2>/dev/null || exit 0
  [ "$parent" = "$$" ] || exit 0
  echo "[watchdog] $TEST_NAME: over its ${TEST_BUDGET_S} s budget, stopping it" >&2
  kill -TERM $$ 2>/dev/null
  pkill -TERM -P $$ 2>/dev/null
) &
WATCHDOG_PID=$!

# Skips (77) when fi_info is there and says the provider is not offered.
require_provider() {
  local prov=$1
  if command -v fi_info >/dev/null 2>&1; then
    fi_info -p "$prov" >/dev/null 2>&1 || skip "libfabric provider '$prov' is not available here (fi_info -p '$prov' failed)"
  fi
}

# A random port in 20000..59999 nobody listens on right now (the bind may
# still race; start_prefill retries with another port).
free_port() {
  local p i
  for i in $(seq 1 50); do
    p=$((20000 + (RANDOM * 32768 + RANDOM + $$) % 40000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  echo $((20000 + $$ % 40000))
}

# ---- configs ---------------------------------------------------------------
# Small geometry by default: 4 layers, 2 heads x 64 x bf16, 16-token pages:
# a page of one layer's K is 4 KiB, a pool page 32 KiB (HEADS=64: 128 KiB).
LAYERS=${LAYERS:-4}
HEADS=${HEADS:-2}
COMPUTE_US=${COMPUTE_US:-2000}
PROVIDER=${PROVIDER:-tcp;ofi_rxm}
CP=${CP:-1}
MAX_BATCH=${MAX_BATCH:-4}
MAX_TOKENS=${MAX_TOKENS:-256}
MIN_TOKENS=${MIN_TOKENS:-1}
ROOMS=${ROOMS:-8}
SEED=${SEED:-$(( ($$ * 7919 + RANDOM) % 1000000 ))}
FRAG=${FRAG:-0.5}
POOL_PAGES=${POOL_PAGES:-256}
PREFILL_POOL_PAGES=${PREFILL_POOL_PAGES:-$POOL_PAGES}
SUBMIT_MS=${SUBMIT_MS:-3000}
ROOM_MS=${ROOM_MS:-10000}
HEARTBEAT_MS=${HEARTBEAT_MS:-200}
CONNECTION_MS=${CONNECTION_MS:-2000}
CORRUPT_ROOMS=${CORRUPT_ROOMS:-}
# The prefill ranks' control-plane address (decode writes an IPv6 one as
# "[addr]:port"); the fabric stays on 127.0.0.1.
CONTROL_HOST=${CONTROL_HOST:-127.0.0.1}
control_endpoint() { # PORT
  case "$CONTROL_HOST" in
    *:*) printf '[%s]:%s' "$CONTROL_HOST" "$1" ;;
    *) printf '%s:%s' "$CONTROL_HOST" "$1" ;;
  esac
}
# The cluster token (control-plane authentication); DECODE_TOKEN lets a test
# give the decode a different one.
TOKEN=${TOKEN:-process-test-token-$$-$RANDOM}
DECODE_TOKEN=${DECODE_TOKEN:-$TOKEN}

common_toml() { # TOKEN
  cat <<EOF
[model]
layers = $LAYERS
kv_heads = $HEADS
head_dim = 64
dtype_bytes = 2
page_size = 16
layer_compute_us = $COMPUTE_US

[fabric]
provider = "$PROVIDER"
bind_address = "127.0.0.1"

[timeouts]
submit_ms = $SUBMIT_MS
room_ms = $ROOM_MS
heartbeat_ms = $HEARTBEAT_MS
connection_ms = $CONNECTION_MS

[cluster]
cp_size = $CP
token = "$1"
EOF
}

# TLS on the control plane (tests/process/tls.sh): "CERT KEY CA" paths, or
# empty for plain caf-io.
PREFILL_TLS=${PREFILL_TLS:-}
DECODE_TLS=${DECODE_TLS:-}
tls_toml() { # "CERT KEY CA" or ""
  [ -n "$1" ] || return 0
  local cert key ca
  read -r cert key ca <<<"$1"
  printf '\n[tls]\ncertificate = "%s"\nkey = "%s"\nca_file = "%s"\n' "$cert" "$key" "$ca"
}

# write_prefill_config FILE RANK PORT
write_prefill_config() {
  { common_toml "$TOKEN"; tls_toml "$PREFILL_TLS"; cat <<EOF

[transfer]
per_layer = true
max_batch = $MAX_BATCH

[prefill]
host = "$CONTROL_HOST"
port = $3
cp_rank = $2
pool_pages = $PREFILL_POOL_PAGES

[workload]
max_tokens = $MAX_TOKENS
EOF
  } >"$1"
}

# write_decode_config FILE PORT...   (one port per CP rank, in rank order)
write_decode_config() {
  local file=$1
  shift
  local list="" p
  for p in "$@"; do list+="${list:+, }\"$(control_endpoint "$p")\""; done
  { common_toml "$DECODE_TOKEN"; tls_toml "$DECODE_TLS"; cat <<EOF

[decode]
pool_pages = $POOL_PAGES
prefill = [$list]

[workload]
rooms = $ROOMS
first_room = ${FIRST_ROOM:-1}
min_tokens = $MIN_TOKENS
max_tokens = $MAX_TOKENS
seed = $SEED
fragmentation = $FRAG
EOF
    [ -n "$CORRUPT_ROOMS" ] && echo "corrupt_rooms = [$CORRUPT_ROOMS]"
  } >"$file"
}

started() { PIDS+=("$1"); ALL_PIDS+=("$1"); }
# reaped PID: drop it from PIDS (its number may be reused from now on).
reaped() {
  local p keep=()
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# stop_prefill PID RANK: SIGTERM, then it must exit 0 within 10 s.
stop_prefill() {
  kill -TERM "$1" 2>/dev/null || { fail "prefill rank $2 (pid $1) is already gone"; return; }
  wait_exit "$1" 10
  [ "$EXIT_CODE" -eq 0 ] || fail "prefill rank $2 exited $EXIT_CODE after SIGTERM, expected 0"
}

# ---- processes ---------------------------------------------------------------

# start_prefill RANK VAR_PID VAR_PORT [LOG_LEVEL]: starts prefill rank RANK on
# a free port and waits (bounded) until it listens; retries another port when
# the bind fails. Sets VAR_PID and VAR_PORT. Log: $TMP/prefill-RANK.log.
start_prefill() {
  local rank=$1 level=${4:-info} attempt port pid logf
  logf="$TMP/prefill-$rank.log"
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    write_prefill_config "$TMP/prefill-$rank.toml" "$rank" "$port"
    "$BIN" prefill --config "$TMP/prefill-$rank.toml" --log-level "$level" >"$logf" 2>&1 &
    pid=$!
    started "$pid"
    local deadline=$((SECONDS + 15))
    while [ $SECONDS -lt $deadline ]; do
      if grep -q "listening on" "$logf"; then
        printf -v "$2" '%s' "$pid"
        printf -v "$3" '%s' "$port"
        log "prefill rank $rank: pid $pid, port $port"
        return 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
      die "prefill rank $rank did not listen within 15 s"
    fi
    wait "$pid" 2>/dev/null
    reaped "$pid"
    if grep -q "cannot publish" "$logf"; then
      log "prefill rank $rank: port $port taken, retrying"
      continue
    fi
    die "prefill rank $rank exited at start: $(tail -n 3 "$logf")"
  done
  die "prefill rank $rank: no free port after 5 tries"
}

# start_decode NAME PORT...: writes $TMP/NAME.toml and starts a decode in the
# background; its pid in DECODE_PID, log $TMP/NAME.log, report $TMP/NAME.json.
start_decode() {
  local name=$1 level=${DECODE_LOG_LEVEL:-info}
  shift
  write_decode_config "$TMP/$name.toml" "$@"
  rm -f "$TMP/$name.json"
  "$BIN" decode --config "$TMP/$name.toml" --json "$TMP/$name.json" --log-level "$level" \
    >"$TMP/$name.log" 2>&1 &
  DECODE_PID=$!
  started "$DECODE_PID"
  log "$name: pid $DECODE_PID (seed $SEED, $ROOMS rooms, provider '$PROVIDER')"
}

# wait_exit PID SECONDS: waits for PID (a child) to exit, bounded; sets
# EXIT_CODE (124 when it did not exit in time; it is then killed).
wait_exit() {
  local pid=$1 limit=$2
  if ! timeout "$limit" tail --pid="$pid" -f /dev/null; then
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    reaped "$pid"
    EXIT_CODE=124
    return
  fi
  wait "$pid"
  EXIT_CODE=$?
  reaped "$pid"
}

# wait_for_log FILE REGEX SECONDS: true once FILE has a line matching REGEX.
wait_for_log() {
  local file=$1 re=$2 limit=$3
  timeout "$limit" bash -c "until grep -Eq -- \"\$0\" \"\$1\" 2>/dev/null; do sleep 0.05; done" \
    "$re" "$file"
}

# json_check FILE PYTHON_EXPR: evaluates the expression with `r` = the report;
# prints the report's summary; true when the expression holds.
json_check() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"  no readable report {sys.argv[1]}: {e}")
    sys.exit(1)
print(f"  report: {r['complete']}/{r['rooms']} complete, {r['failed']} failed, "
      f"bit_exact={r['bit_exact']}, {r['bytes_written']}/{r['bytes_expected']} bytes, "
      f"failures={r['failures']}")
ok = eval(sys.argv[2], {}, {"r": r})
if not ok:
    print(f"  report check failed: {sys.argv[2]}")
sys.exit(0 if ok else 1)
EOF
}

# The standard all-good check of a decode report.
ALL_EXACT='r["complete"] == r["rooms"] and r["failed"] == 0 and r["bit_exact"] and r["bytes_written"] == r["bytes_expected"]'

# settled_rooms LOG RANK: the room ids prefill rank RANK logged as settled
# (complete, failed or refused), sorted and unique, one a line.
settled_rooms() {
  grep -Eo "rank $2: room [0-9]+ (complete|failed|refused)" "$1" 2>/dev/null |
    awk '{print $4}' | sort -n | uniq
}
failed_rooms() {
  grep -Eo "rank $2: room [0-9]+ (failed|refused)" "$1" 2>/dev/null | awk '{print $4}' | sort -n | uniq
}

# wait_settled LOG RANK N SECONDS: true once rank RANK logged N distinct rooms settled.
wait_settled() {
  local deadline=$((SECONDS + $4 + 1)) t0=$EPOCHREALTIME
  while :; do
    [ "$(settled_rooms "$1" "$2" | wc -l)" -ge "$3" ] && return 0
    le "$(since "$t0")" "$4" || return 1
    [ $SECONDS -le $deadline ] || return 1
    sleep 0.05
  done
}

# check_no_false_complete LOG: every room the decode logged complete was bit-exact.
check_no_false_complete() {
  local bad
  bad=$(grep "receiver: room [0-9]* complete" "$1" | grep -vc "bit-exact")
  [ "$bad" -eq 0 ] || fail "decode logged $bad rooms complete without bit-exact"
}

# ---- shared checks of the decode-lost tests --------------------------------
# expect_prefill_settles T0 WHAT: after the decode was lost at T0 ("killed",
# "froze"), the prefill settles every room within room_ms, logs some as
# failed, and stays alive.
expect_prefill_settles() {
  local t0=$1 what=$2 failed
  if wait_settled "$PF_LOG" 0 "$ROOMS" $((ROOM_MS / 1000)); then
    log "prefill settled all $ROOMS rooms $(since "$t0") s after the decode $what (room_ms $ROOM_MS, submit_ms $SUBMIT_MS, connection_ms $CONNECTION_MS)"
  else
    fail "prefill settled only rooms [$(settled_rooms "$PF_LOG" 0 | xargs)] of 1..$ROOMS within room_ms = $ROOM_MS ms"
  fi
  failed=$(failed_rooms "$PF_LOG" 0 | xargs)
  [ -n "$failed" ] || fail "prefill logged no room as failed after the decode $what"
  log "prefill: rooms failed: [$failed]"
  grep -E "rank 0: room [0-9]+ failed" "$PF_LOG" | head -n 3 | sed 's/^/    /'
  kill -0 "$PF_PID" 2>/dev/null || die "prefill died after the decode $what"
}

# expect_fresh_decode_completes: a new decode (same room ids) against the same
# prefill completes every room bit-exactly (restart + reconnect).
expect_fresh_decode_completes() {
  local t
  ROOMS=4
  SEED=$((SEED + 1))
  t=$(now)
  start_decode decode2 "$PF_PORT"
  wait_exit "$DECODE_PID" 40
  log "decode2 exit $EXIT_CODE after $(since "$t") s"
  [ "$EXIT_CODE" -eq 0 ] || fail "the new decode exited $EXIT_CODE, expected 0"
  json_check "$TMP/decode2.json" "$ALL_EXACT" || fail "the new decode's rooms are not all bit-exact"
}
