#!/usr/bin/env bash
# Command-line values the parser would otherwise take silently: each is
# refused with exit 2 and a message naming what is wrong, before anything
# runs. Last, the effective config a process logs at debug level.
# Usage: cli_args_test.sh BIN DEMO_TOML (config/demo.toml)
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
check_refused "negative notify spin" "expected an unsigned integer below 2^64" \
  bench tail --notify-spin-us -5
check_refused "negative write iov" "expected an unsigned integer below 2^64" \
  bench tail --write-iov -1
# A value a flag set is blamed on the flag, not on the config file; an error
# on a key no flag set names the flags that were in play.
check_refused "unknown provider by flag" \
  "^layerstream: --provider: fabric.provider: unknown provider \"verbs\"" demo --provider verbs
check_refused "bad level by soak flag" "^layerstream: --log-level: log.level: unknown level" \
  bench soak --rooms 1 --log-level loud
printf '[model]\nlayer_compute_us = 30000\n' >"$tmp/long_layers.toml"
check_refused "forward too long with a flag" \
  "long_layers.toml: model.layer_compute_us: .*(with the flags --layers (model.layers))" \
  demo --config "$tmp/long_layers.toml" --layers 4000
# --quick sets the repetitions: both given would drop one silently.
check_refused "bench tail quick with repetitions" "excludes" bench tail --quick --repetitions 9
check_refused "bench transport quick with repetitions" "excludes" \
  bench transport --quick --repetitions 9
# A report path is checked before the run, not after it.
check_refused "report in a missing directory" "does not exist" \
  demo --rooms 1 --json "$tmp/no/such/dir/report.json"
check_refused "trace path that is a directory" "is a directory" demo --rooms 1 --trace "$tmp"
check_refused "bench report in a missing directory" "does not exist" \
  bench tail --quick --json "$tmp/no/such/dir/tail.json"
# Decimal as written, not octal: 064 is 64 tokens, a multiple of the page
# size (16), where octal 064 (52) is not.
timeout 120 "$bin" demo --rooms 2 --chunk-tokens 064 --log-level warn >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -ne 0 ]; then
  echo "FAIL a leading zero is decimal: exit $rc, stderr: $(head -c 400 "$tmp/err")"; fails=$((fails + 1))
else
  echo "ok   a leading zero is decimal: --chunk-tokens 064 ran"
fi
# A report that exists but cannot be written (root writes any file).
if [ "$(id -u)" -ne 0 ]; then
  touch "$tmp/readonly.json" && chmod 444 "$tmp/readonly.json"
  check_refused "a read-only report" "exists and is not writable" \
    demo --rooms 1 --json "$tmp/readonly.json"
else
  echo "skip a read-only report: root writes any file"
fi
# An address refused names the setting it came from.
sed 's/^bind_address = "127.0.0.1"/bind_address = "192.0.2.77"/' "$2" >"$tmp/bind.toml"
check_refused "a bind address not of this host" \
  "fabric.bind_address: refusing to bind to 192.0.2.77" demo --config "$tmp/bind.toml" --rooms 1
check_refused "transport bench of no repetitions" "must be > 0" bench transport --repetitions 0
check_refused "prefill with an empty config path" "an empty path" prefill --config ""
check_refused "decode with an empty config path" "an empty path" decode --config ""

# At debug level a process logs the config it runs with, flags applied and
# the token redacted (the demo's file, with a token added).
secret=s3cret-cluster-token-for-this-test
sed "s/^\[cluster\]$/[cluster]\ntoken = \"$secret\"/" "$2" >"$tmp/demo.toml"
timeout 120 "$bin" demo --config "$tmp/demo.toml" --rooms 1 --layers 3 --log-level debug \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out" "$tmp/err" >"$tmp/all"
if [ "$rc" -ne 0 ] || ! grep -q "effective config" "$tmp/all" ||
  ! grep -q "^layers = 3" "$tmp/all" || ! grep -q "^token = \"<redacted" "$tmp/all" ||
  grep -q "$secret" "$tmp/all"; then
  echo "FAIL the effective config at debug: exit $rc, output: $(grep -m3 -e effective -e token "$tmp/all")"
  fails=$((fails + 1))
else
  echo "ok   the effective config at debug: $(grep -m1 "^token" "$tmp/all")"
fi

echo "$fails failed"
[ "$fails" -eq 0 ]
