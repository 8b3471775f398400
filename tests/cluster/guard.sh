#!/usr/bin/env bash
# The test hosts and the net guard:
#  - hosts.sh up is idempotent, creates nothing in the root namespace, and
#    the hosts are gone after the test's trap ran on SIGTERM; after a SIGKILL
#    (no trap) `hosts.sh reap` removes them and the processes left inside;
#  - inside a test host the kernel's answer matches (net_guard_test with
#    LS_EXPECT_TEST_HOST), and a process there reaches its own subnet only;
#  - in the root namespace `layerstream prefill` / `decode` refuse the test
#    subnet's addresses (exit 2, with the reason) before opening anything.
# Usage: guard.sh LAYERSTREAM NET_GUARD_TEST
CP=1
ROOMS=4
source "$(dirname "$0")/lib.sh" "$@"
GUARD_TEST=${2:?usage: guard.sh LAYERSTREAM NET_GUARD_TEST}

root_state() { { ip netns list | awk '{print $1}' | grep -v "^$HOSTS_PREFIX-$HOSTS_ID-"; ip -o link | awk -F': ' '{print $2}'; } | sort; }
before=$(root_state)

cluster_up
first=$(hosts_namespaces | sort | xargs)
hosts_up 2 || fail "a second 'up 2' failed"
[ "$(hosts_namespaces | sort | xargs)" = "$first" ] || fail "a second 'up 2' changed the namespaces: $first -> $(hosts_namespaces | sort | xargs)"
for i in 0 1; do
  n=$(ip -n "$(host_ns $i)" -4 -o addr show dev veth0 | wc -l)
  [ "$n" -eq 1 ] || fail "host $i has $n IPv4 addresses on veth0 after two 'up', expected 1"
  [ "$(ip -n "$(host_ns $i)" -br link show lo | awk '{print $2}')" = UNKNOWN ] || fail "host $i: lo is not up"
done
[ "$(root_state)" = "$before" ] || fail "the root namespace changed: $(diff <(echo "$before") <(root_state) | xargs)"
log "hosts: idempotent, root namespace untouched"

# The kernel's answer inside a host, and the refusals there.
on_host 1 env LS_EXPECT_TEST_HOST="$(host_ns 1)" "$GUARD_TEST" --gtest_brief=1 >"$TMP/inside.log" 2>&1 ||
  fail "net_guard_test inside $(host_ns 1) failed: $(tail -n 5 "$TMP/inside.log")"
on_host 1 "$GUARD_TEST" --gtest_brief=1 --gtest_filter='*ExactlyWhenExpected' >/dev/null 2>&1 &&
  fail "net_guard_test said 'not in a test host' inside one"
log "net_guard_test inside $(host_ns 1): kernel identity matches"

# expect_refusal NAME TEXT CMD...: CMD exits 2 and says TEXT.
expect_refusal() {
  local name=$1 text=$2 rc
  shift 2
  timeout 20 "$@" >"$TMP/$name.out" 2>&1
  rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$text" "$TMP/$name.out"; then
    fail "$name: expected exit 2 saying '$text', got exit $rc: $(head -c 400 "$TMP/$name.out")"
  else
    log "$name: refused: $(grep -F -- "$text" "$TMP/$name.out" | head -n 1 | cut -c 1-200)"
  fi
}
write_cluster_configs
expect_refusal root-prefill "refusing to bind to $(host_ip 1)" \
  "$BIN" prefill --config "$TMP/prefill-0.toml"
expect_refusal root-decode "refusing to bind to $(host_ip 0)" \
  "$BIN" decode --config "$TMP/decode.toml"
"$PY" "$CLUSTER_DIR/derive_config.py" "$TMP/decode.toml" "$TMP/decode-lo.toml" 'fabric.bind_address="127.0.0.1"'
expect_refusal root-decode-connect "refusing to connect to $(host_ip 1)" \
  "$BIN" decode --config "$TMP/decode-lo.toml"
# Inside a host: an address off its subnet (this machine's own eth0 side).
"$PY" "$CLUSTER_DIR/derive_config.py" "$TMP/decode.toml" "$TMP/decode-off.toml" 'decode.prefill=["192.0.2.1:7001"]'
expect_refusal host-decode-off-subnet "would leave the machine" \
  env LS_HOSTS_ID="$HOSTS_ID" bash "$HOSTS_SH" exec 0 "$BIN" decode --config "$TMP/decode-off.toml"
# The case the old rule let through: in the root namespace, an address on a
# directly connected subnet (this stack's own, so that even a regression
# would not send anything off the machine).
own=$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -n 1)
if [ -n "$own" ]; then
  "$PY" "$CLUSTER_DIR/derive_config.py" "$TMP/decode-lo.toml" "$TMP/decode-own.toml" "decode.prefill=[\"$own:7001\"]"
  expect_refusal root-decode-connected-subnet "refusing to connect to $own: this process's network namespace is not a test host" \
    "$BIN" decode --config "$TMP/decode-own.toml"
else
  log "no global IPv4 address in the root namespace: the connected-subnet case is not checked"
fi
# The driver's own check: a command meant for a host does not run elsewhere.
out=$(bash "$HOSTS_SH" __inside "$(host_ns 0)" true 2>&1) && fail "hosts.sh ran a host's command in the root namespace"
log "driver: $out"

# Tear-down: a cluster test stopped by SIGTERM (trap) and one SIGKILLed (reap).
# kill_child_run SIGNAL: starts deploy.sh, signals it once its prefill ranks
# listen; prints its pid.
kill_child_run() {
  local child deadline=$((SECONDS + 30))
  TEST_BUDGET_S=60 bash "$CLUSTER_DIR/deploy.sh" "$BIN" 1 >"$TMP/child-$1.out" 2>&1 &
  child=$!
  started "$child"
  until grep -q "kv-per-layer: pid" "$TMP/child-$1.out" || [ $SECONDS -ge $deadline ]; do sleep 0.1; done
  kill "-$1" "$child"
  wait_exit "$child" 20
  echo "$child"
}
child=$(kill_child_run TERM)
left=$(ip netns list | awk '{print $1}' | grep -c "^$HOSTS_PREFIX-p$child-")
[ "$left" -eq 0 ] || fail "after SIGTERM, deploy.sh (pid $child) left $left namespaces"
log "SIGTERM to a running cluster test: its trap left nothing ($(grep -c 'test hosts' "$TMP/child-TERM.out") host set made)"
child=$(kill_child_run KILL)
left=$(ip netns list | awk '{print $1}' | grep -c "^$HOSTS_PREFIX-p$child-")
[ "$left" -ge 1 ] || fail "a SIGKILLed deploy.sh left no namespaces: the reap check below proves nothing"
hosts_reap
left=$(ip netns list | awk '{print $1}' | grep -c "^$HOSTS_PREFIX-p$child-")
[ "$left" -eq 0 ] || fail "hosts.sh reap left $left namespaces of the killed run $child"
for pid in $(grep -Eo "pid [0-9]+ on $HOSTS_PREFIX-p$child-" "$TMP/child-KILL.out" | awk '{print $2}'); do
  # Orphans are reaped by init, which may be slow: a zombie counts as gone.
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ] && fail "process $pid of the killed run is still alive after reap (state $state)"
done
log "SIGKILL to a running cluster test: reap removed its hosts and the processes left inside"
[ "$(root_state)" = "$before" ] || fail "the root namespace changed: $(diff <(echo "$before") <(root_state) | xargs)"
exit $FAILED
