#!/usr/bin/env bash
# A prefill rank does not start writing a room that waited in its queue past
# the point where the writes could still end before decode gives up on it
# (timeouts.room_ms): decode would fail that room and could hand its pages
# to another. One forward at a time of 8 x 50 ms layers (400 ms) and room_ms
# = 3000, so a room starts only within 3000 - 400 - 300 (a tenth for the
# writes) = 2300 ms of asking: about six rooms run, the rest must fail with
# the scheduler's reason before decode's own deadline (the refusal comes
# when a forward ends, at most 400 ms past 2300 ms), and no room's bytes
# differ.
# Usage: late_rooms_test.sh BIN
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/late.toml" <<'TOML'
[model]
layers = 8
kv_heads = 8
head_dim = 64
page_size = 16
layer_compute_us = 50000

[transfer]
max_batch = 1

[timeouts]
submit_ms = 1000
room_ms = 3000

[prefill]
pool_pages = 256

[decode]
pool_pages = 256

[workload]
rooms = 8
min_tokens = 64
max_tokens = 512
seed = 1
TOML
timeout 60 "$bin" demo --config "$tmp/late.toml" --log-level warn >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ "$rc" -eq 1 ] || fail "demo exited $rc, expected 1 (some rooms fail)"
late=$(grep -c "failed: room [0-9]*: .*too late to start a forward" "$tmp/out")
[ "$late" -ge 1 ] || fail "no room was refused as too late to start"
grep -q "bytes differ" "$tmp/out" && fail "a room's bytes differ"
grep -q "did not answer" "$tmp/out" && fail "decode timed a room out: prefill should have refused it first"
echo "rooms refused as too late: $late"
exit $((fails > 0))
