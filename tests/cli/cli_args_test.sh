#!/usr/bin/env bash
# Command-line values the parser would otherwise take silently: each is
# refused with exit 2 and a message naming what is wrong, before anything
# runs. Usage: cli_args_test.sh BIN
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

check_refused() { # name, expected substring, args...
  local name=$1 want=$2
  shift 2
  timeout 60 "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q -- "$want" "$tmp/err"; then
    echo "FAIL $name: exit $rc, stderr: $(head -c 400 "$tmp/err")"; fails=$((fails + 1))
  else
    echo "ok   $name: $(grep -m1 -- "$want" "$tmp/err")"
  fi
}

check_refused "negative 64-bit flag" "expected an unsigned integer below 2^64" \
  demo --chunk-tokens -16
check_refused "64-bit flag past 2^64" "expected an unsigned integer below 2^64" \
  demo --chunk-tokens 36893488147419103232
check_refused "negative bench value" "expected an unsigned integer below 2^64" \
  bench tail --tokens 256 -5
check_refused "soak of no rooms" "--rooms" bench soak --rooms 0
# Decimal as written, not octal: 064 is 64 tokens, a multiple of the page
# size (16), where octal 064 (52) is not.
timeout 120 "$bin" demo --rooms 2 --chunk-tokens 064 --log-level warn >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -ne 0 ]; then
  echo "FAIL a leading zero is decimal: exit $rc, stderr: $(head -c 400 "$tmp/err")"; fails=$((fails + 1))
else
  echo "ok   a leading zero is decimal: --chunk-tokens 064 ran"
fi
check_refused "transport bench of no repetitions" "must be > 0" bench transport --repetitions 0
check_refused "prefill with an empty config path" "an empty path" prefill --config ""
check_refused "decode with an empty config path" "an empty path" decode --config ""

echo "$fails failed"
[ "$fails" -eq 0 ]
