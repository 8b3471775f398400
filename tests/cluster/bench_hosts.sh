#!/usr/bin/env bash
# The tail benchmark across test hosts: `layerstream bench tail` runs both
# paths inside one process over loopback; this runs real prefill ranks and a
# decode node on separate test hosts (hosts.sh) with every link rate-limited
# (tc tbf) so that one layer's transfer takes about one layer's compute, and
# prints, per repetition and as medians,
#   tail_bulk  the bulk path's exposed tail T (the whole transfer, after the forward)
#   tail_layer the per-layer path's exposed tail
#   T/L        T's share per layer; and tail_layer/(T/L), tail_layer/tail_bulk
# (the same definitions as `layerstream bench tail`). Each run is one seeded
# workload; every room must complete bit-exactly. A tail is the slowest rank's
# median over its batches, from the ranks' stats lines.
#
# Usage (root, or CAP_NET_ADMIN):
#   sudo tests/cluster/bench_hosts.sh build/layerstream [REPETITIONS]
# Settings from the environment (defaults): CP (2), LAYERS (8), HEADS (2),
# COMPUTE_US (20000 per layer), ROOMS (12), MAX_BATCH (4), TOKENS (256 per
# room), RATE (lib.sh matched_rate: one layer of a batch in one layer's
# compute; e.g. RATE=100mbit). Exit 0 when every run completed bit-exactly.
# No netem in this kernel: the link adds no delay, only the rate limit.
CP=${CP:-2}
LAYERS=${LAYERS:-8}
COMPUTE_US=${COMPUTE_US:-20000}
TOKENS=${TOKENS:-256}
MIN_TOKENS=$TOKENS
MAX_TOKENS=$TOKENS
MAX_BATCH=${MAX_BATCH:-4}
ROOMS=${ROOMS:-12}
FRAG=${FRAG:-0.3}
REPS=${2:-3}
TEST_BUDGET_S=${TEST_BUDGET_S:-$((60 + REPS * 40))}
source "$(dirname "$0")/lib.sh" "$@"
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPETITIONS must be a positive number, got '$REPS'"

RATE=${RATE:-$(matched_rate)}
cluster_up
hosts_rate "$RATE" || die "tc tbf rate $RATE failed"
log "every link limited to $RATE; cp $CP, $LAYERS layers x $COMPUTE_US us compute, $ROOMS rooms of $TOKENS tokens, $MAX_BATCH per batch, $REPS repetitions (per-layer and bulk interleaved)"

layer_tails=()
bulk_tails=()
for ((rep = 0; rep < REPS; rep++)); do
  # The order alternates, so that drift favours neither path.
  for k in 0 1; do
    if [ $(((k + rep) % 2)) -eq 0 ]; then
      PER_LAYER=true tail_run "per-layer-$rep"
      layer_tails+=("$RUN_TAIL")
    else
      PER_LAYER=false tail_run "bulk-$rep"
      bulk_tails+=("$RUN_TAIL")
    fi
  done
  log "repetition $rep: tail_layer ${layer_tails[$rep]} ms, tail_bulk ${bulk_tails[$rep]} ms, $(tail_figures "${layer_tails[$rep]}" "${bulk_tails[$rep]}")"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ml=$(median "${layer_tails[@]}")
mb=$(median "${bulk_tails[@]}")
echo "rate $RATE, cp $CP, $LAYERS layers x $((COMPUTE_US / 1000)) ms: tail_layer $ml ms, tail_bulk $mb ms, $(tail_figures "$ml" "$mb") (medians of $REPS)"
exit $FAILED
