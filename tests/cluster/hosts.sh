#!/usr/bin/env bash
# Test hosts on one machine: one network namespace per host, each joined by a
# veth pair to a bridge that lives in a namespace of its own. Nothing is
# created in the root namespace; the test subnet exists only inside these
# namespaces (from the root namespace it is routed off the machine, so every
# cluster process checks that it runs inside a test host: common/net_guard.hpp).
#
#   hosts.sh up N [ID]         make (or complete) N hosts; idempotent
#   hosts.sh down [ID]         remove them, and every process still inside
#   hosts.sh exec I CMD...     run CMD inside host I (0-based), after checking it is there
#   hosts.sh list [ID]         the hosts' namespaces and addresses
#   hosts.sh reap              remove the hosts of test runs whose owner died
#
# Names: namespace lstest-ID-hI (host I), lstest-ID-br (the bridge). The
# prefix "lstest-" and the "-hI" suffix are what net_guard recognises as a
# test host. ID defaults to $LS_HOSTS_ID or "try"; the cluster tests use
# "p<their pid>", so parallel runs never share hosts and `reap` can tell a
# leftover (its pid is gone) from a live run.
# Host I has address $LS_HOSTS_NET.(I+1)/24 on veth0 (default 10.201.0.0/24).
#
# Sourced (by tests/cluster/*.sh) it defines the functions below and runs nothing.

HOSTS_SH=$(readlink -f "${BASH_SOURCE[0]}")
HOSTS_ID=${LS_HOSTS_ID:-try}
HOSTS_NET=${LS_HOSTS_NET:-10.201.0}
HOSTS_PREFIX=lstest

host_ns() { echo "$HOSTS_PREFIX-$HOSTS_ID-h$1"; }
bridge_ns() { echo "$HOSTS_PREFIX-$HOSTS_ID-br"; }
host_ip() { echo "$HOSTS_NET.$(($1 + 1))"; }

# The namespaces of this ID, one a line (host namespaces and the bridge).
hosts_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$HOSTS_PREFIX-$HOSTS_ID-(h[0-9]+|br)\$"
}

# True when namespaces can be made here (root or CAP_NET_ADMIN, ip installed);
# otherwise prints why on stdout.
hosts_supported() {
  if ! command -v ip >/dev/null 2>&1; then
    echo "iproute2 ('ip') is not installed"
    return 1
  fi
  local probe="$HOSTS_PREFIX-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "cannot create network namespaces (needs root or CAP_NET_ADMIN; uid $(id -u))"
    return 1
  fi
  ip netns delete "$probe"
  return 0
}

# hosts_up N: N hosts and the bridge, converging from whatever is there.
hosts_up() {
  local n=$1 br i ns
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || {
    echo "hosts.sh: up needs a host count in 1..250, got '$n'" >&2
    return 2
  }
  br=$(bridge_ns)
  ip netns list | awk '{print $1}' | grep -qx "$br" || ip netns add "$br" || return 1
  ip -n "$br" link set lo up || return 1
  ip -n "$br" link show br0 >/dev/null 2>&1 || ip -n "$br" link add br0 type bridge || return 1
  ip -n "$br" link set br0 up || return 1
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    ip netns list | awk '{print $1}' | grep -qx "$ns" || ip netns add "$ns" || return 1
    ip -n "$ns" link set lo up || return 1
    if ! ip -n "$ns" link show veth0 >/dev/null 2>&1; then
      # A half-made pair (bridge end only) from an interrupted run: start over.
      ip -n "$br" link del "p$i" 2>/dev/null
      # Both ends are created inside namespaces: nothing touches the root one.
      ip -n "$br" link add "p$i" type veth peer name veth0 netns "$ns" || return 1
    fi
    ip -n "$br" link set "p$i" master br0 up || return 1
    ip -n "$ns" addr replace "$(host_ip "$i")/24" dev veth0 || return 1
    ip -n "$ns" link set veth0 up || return 1
  done
  # Hosts beyond N from an earlier, larger `up`: removed, so that N is exact.
  for ns in $(hosts_namespaces | grep -v -- "-br\$"); do
    i=${ns##*-h}
    [ "$i" -lt "$n" ] || hosts_delete_ns "$ns"
  done
}

# hosts_delete_ns NS: kills what still runs inside NS (only test processes
# run there), then deletes it; its veth pair goes with it.
hosts_delete_ns() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    local t
    for t in $(seq 1 50); do
      [ -z "$(ip netns pids "$1" 2>/dev/null)" ] && break
      sleep 0.02
    done
  fi
  ip netns delete "$1" 2>/dev/null
}

hosts_down() {
  local ns
  for ns in $(hosts_namespaces); do hosts_delete_ns "$ns"; done
  [ -z "$(hosts_namespaces)" ]
}

# Removes the hosts of test runs (ID "p<pid>") whose process is gone.
hosts_reap() {
  local ns id pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$HOSTS_PREFIX-p[0-9]+-"); do
    id=${ns#"$HOSTS_PREFIX"-}
    id=${id%%-*}
    pid=${id#p}
    kill -0 "$pid" 2>/dev/null || hosts_delete_ns "$ns"
  done
}

# on_host I CMD...: runs CMD inside host I. The child checks, before CMD runs,
# that its network namespace really is that host's (ip netns identify).
on_host() {
  local ns
  ns=$(host_ns "$1")
  shift
  ip netns exec "$ns" bash "$HOSTS_SH" __inside "$ns" "$@"
}

# on_host_exec I CMD...: on_host that replaces the calling shell; for
# background starts (`on_host_exec 1 layerstream ... &`), so that $! is CMD's
# own pid and a signal to it reaches CMD, not a wrapper shell.
on_host_exec() {
  local ns
  ns=$(host_ns "$1")
  shift
  exec ip netns exec "$ns" bash "$HOSTS_SH" __inside "$ns" "$@"
}

# hosts_rate RATE [I...]: a tbf rate limit (e.g. 200mbit) on both ends of
# each host's link (all hosts when none are named); RATE "off" removes it.
hosts_rate() {
  local rate=$1 i
  shift
  local list=("$@")
  if [ ${#list[@]} -eq 0 ]; then
    for ns in $(hosts_namespaces | grep -v -- "-br\$"); do list+=("${ns##*-h}"); done
  fi
  for i in "${list[@]}"; do
    if [ "$rate" = off ]; then
      tc -n "$(host_ns "$i")" qdisc del dev veth0 root 2>/dev/null
      tc -n "$(bridge_ns)" qdisc del dev "p$i" root 2>/dev/null
    else
      tc -n "$(host_ns "$i")" qdisc replace dev veth0 root tbf rate "$rate" burst 256kb latency 100ms || return 1
      tc -n "$(bridge_ns)" qdisc replace dev "p$i" root tbf rate "$rate" burst 256kb latency 100ms || return 1
    fi
  done
}

# host_link I up|down: the bridge end of host I's cable (a partition: the
# host keeps its address, its packets go nowhere).
host_link() {
  ip -n "$(bridge_ns)" link set "p$1" "$2"
}

hosts_list() {
  local ns
  for ns in $(hosts_namespaces); do
    printf '%s\t%s\n' "$ns" "$(ip -n "$ns" -br -4 addr show dev veth0 2>/dev/null | awk '{print $3}')"
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -u
  cmd=${1:-}
  shift || true
  case $cmd in
  up)
    [ $# -ge 1 ] || { echo "usage: hosts.sh up N [ID]" >&2; exit 2; }
    HOSTS_ID=${2:-$HOSTS_ID}
    why=$(hosts_supported) || { echo "hosts.sh: $why" >&2; exit 77; }
    hosts_up "$1" || { echo "hosts.sh: set-up failed; removing what was made" >&2; hosts_down; exit 1; }
    hosts_list
    ;;
  down)
    HOSTS_ID=${1:-$HOSTS_ID}
    hosts_down
    ;;
  exec)
    [ $# -ge 2 ] || { echo "usage: hosts.sh exec I CMD..." >&2; exit 2; }
    on_host "$@"
    ;;
  list)
    HOSTS_ID=${1:-$HOSTS_ID}
    hosts_list
    ;;
  reap)
    hosts_reap
    ;;
  __inside)
    # Internal (on_host): refuse to run CMD anywhere but in namespace $1.
    here=$(ip netns identify $$ 2>/dev/null)
    if [ "$here" != "$1" ]; then
      echo "hosts.sh: refusing to run '$2': this is network namespace '${here:-<root or unnamed>}', not test host $1" >&2
      exit 3
    fi
    shift
    exec "$@"
    ;;
  *)
    sed -n '2,/^$/p' "$HOSTS_SH" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
fi
