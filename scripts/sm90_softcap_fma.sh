#!/usr/bin/env bash
# The sm_90a softcap's cost over its plain twin (issue 19: <= 10% in the forward) with 0,
# 1 and 2 of every 4 n-tiles' probabilities made on the FMA pipe (BENCH_FMA_EXP2,
# `fwd::Variant::fma_exp2`): bf16 rows at d64 and d128, 8K and 16K, causal and not, cap
# 30, three interleaved rounds (scripts/sm90_fwd_variants.sh).
#
#   bash scripts/sm90_softcap_fma.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
export BENCH_D="${BENCH_D:-64,128}" BENCH_DTYPE="${BENCH_DTYPE:-bf16}" BENCH_SEQ="${BENCH_SEQ:-8192,16384}"
OUT="${1:?usage: sm90_softcap_fma.sh OUT_DIR}"
for c in 1 0; do
  cfgs="plain$c:BENCH_CAUSAL=$c,BENCH_PATH=sm90tst"
  pairs=""
  for k in 0 1 2; do
    cfgs="$cfgs cap$c.fx$k:BENCH_CAUSAL=$c,BENCH_PATH=sm90tst,BENCH_SOFTCAP=30,BENCH_FMA_EXP2=$k"
    pairs="$pairs cap$c.fx$k=plain$c"
  done
  bash scripts/sm90_fwd_variants.sh "$OUT/causal$c" "plain$c" "$cfgs" "$pairs"
done
