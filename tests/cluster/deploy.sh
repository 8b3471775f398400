#!/usr/bin/env bash
# A cluster deployed from the shipped config files: one decode host and CP
# prefill hosts (CP = $2, default 2), every process on its own test host.
# Three runs of randomized rooms (seed, prompt lengths, page layouts,
# fragmentation and chunk size drawn per test run):
#   1. K/V, per-layer transfer;
#   2. the same workload with the bulk transfer: the decode pool must be
#      identical to run 1's (pool digest), not just bit-exact;
#   3. MLA, per-layer, chunked prefill.
# Every room completes bit-exactly, the decode host's veth received at least
# the bytes written (the data crossed the link), and every rank exits 0.
# Usage: deploy.sh LAYERSTREAM [CP]
CP=${2:-2}
source "$(dirname "$0")/lib.sh" "$@"

# Per test run: seed from lib.sh; chunk size and fragmentation from it.
FRAG=$(awk -v s="$SEED" 'BEGIN { srand(s); printf "%.2f", 0.1 + 0.8 * rand() }')
CHUNKS=(32 64 128)
RUN_CHUNK=${CHUNKS[$((SEED % 3))]}
cluster_up

# run_once NAME: configs, prefill ranks, decode; checks the report; stops the ranks.
run_once() {
  local name=$1 t rx0 rx1 written
  write_cluster_configs
  start_cluster_prefills
  rx0=$(veth_bytes "$(decode_host)" rx)
  t=$(now)
  start_cluster_decode "$name"
  wait_exit "$DECODE_PID" 60
  log "$name: decode exit $EXIT_CODE after $(since "$t") s"
  [ "$EXIT_CODE" -eq 0 ] || fail "$name: decode exited $EXIT_CODE, expected 0"
  json_check "$TMP/$name.json" "$ALL_EXACT and r['cp'] == $CP and r['mla'] == ('$MLA' == 'true')" ||
    fail "$name: not every room complete and bit-exact"
  local n
  n=$(grep -c "complete: .* from $CP ranks, bit-exact" "$TMP/$name.log")
  [ "$n" -eq "$ROOMS" ] || fail "$name: decode logged $n rooms complete from $CP ranks, expected $ROOMS"
  rx1=$(veth_bytes "$(decode_host)" rx)
  written=$(json_get "$TMP/$name.json" bytes_written 2>/dev/null || echo 0)
  log "$name: decode veth0 received $((rx1 - rx0)) bytes for $written bytes of KV"
  [ $((rx1 - rx0)) -ge "$written" ] && [ "$written" -gt 0 ] ||
    fail "$name: the decode host's link carried less than the KV bytes"
  stop_cluster_prefills
  local r
  for ((r = 0; r < CP; r++)); do
    [ -n "${PF_STATS[$r]}" ] || fail "$name: rank $r printed no stats at exit"
  done
  cp "$TMP/$name.log" "$TMP/$name.kept" # lib.sh prints *.log tails on failure only
}

MLA=false PER_LAYER=true CHUNK=0 run_once kv-per-layer
MLA=false PER_LAYER=false CHUNK=0 run_once kv-bulk
d1=$(json_get "$TMP/kv-per-layer.json" pool_digest 2>/dev/null)
d2=$(json_get "$TMP/kv-bulk.json" pool_digest 2>/dev/null)
log "decode pool digest: per-layer $d1, bulk $d2"
[ -n "$d1" ] && [ "$d1" = "$d2" ] || fail "per-layer and bulk runs of one workload left different decode pools"
MLA=true HEADS=1 PER_LAYER=true CHUNK=$RUN_CHUNK run_once mla-chunked
exit $FAILED
