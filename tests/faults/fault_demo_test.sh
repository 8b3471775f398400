#!/usr/bin/env bash
# Injected CQ error completions at room level: the demo (prefill and decode in
# one process, real tcp;ofi_rxm writes on loopback) with workload.fault_rate
# turning random write completions into error completions. Every room must
# end complete and bit-exact or failed with a reason; some of each must
# occur (the seed makes the run reproducible); nothing hangs.
# Usage: fault_demo_test.sh LAYERSTREAM [PROVIDER]
set -u
BIN=$1
PROVIDER=${2:-tcp;ofi_rxm}
export FI_TCP_IFACE=lo FI_NET_IFACE=lo FI_SOCKETS_IFACE=lo
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ls-fault-demo.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=$(command -v python3); fi
# 8 rooms of 4 layers (the demo config's seeded layouts), 0.5 % of write
# completions turned into errors: about one room in eight fails here.
timeout 120 "$BIN" demo --rooms 8 --layers 4 --fault-rate 0.005 --provider "$PROVIDER" \
  --log-level warn --json "$TMP/r.json" >"$TMP/out.log" 2>&1
rc=$?
cat "$TMP/out.log" | grep -v "^\[" | head -n 12
[ $rc -ne 124 ] || { echo "FAIL: the demo did not finish within 120 s"; exit 1; }
# 1: some rooms failed, as injected. Anything else (0, a signal, a
# sanitizer's 66/86) fails the test even if the report reads well.
[ $rc -eq 1 ] || { echo "FAIL: the demo exited $rc, expected 1 (rooms failed by injection)"; exit 1; }
"$PY" - "$TMP/r.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"rooms {r['rooms']}: {r['complete']} complete (bit_exact={r['bit_exact']}), {r['failed']} failed")
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("FAIL:", what); ok = False
check(r['complete'] + r['failed'] == r['rooms'], "a room is neither complete nor failed")
check(r['failed'] >= 1, "no room failed: the injected errors were lost")
check(r['complete'] >= 1, "no room completed: the faults spread beyond their rooms")
check(r['bit_exact'], "a complete room is not bit-exact")
check(all('injected CQ error completion' in f for f in r['failures']),
      f"a failure without the injection's reason: {r['failures']}")
check(r['bytes_written'] < r['bytes_expected'], "failed rooms reported every byte written")
sys.exit(0 if ok else 1)
PYEOF
