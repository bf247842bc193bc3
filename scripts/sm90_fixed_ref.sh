#!/usr/bin/env bash
# One device command for the softcap's fixed softmax reference (`fwd::Variant::fixed_ref`,
# `OnlineSoftmax::fixed`, session 38) beside the shipping softcap kernels (the same build:
# BENCH_FIXED_REF switches). Bundle: BUNDLE_DIR=target/gb2 BUNDLE_TESTS=gpu_fwd_sm90_scores
# bash scripts/bwd_bundle.sh;  then from target/gb2, as two device commands (each under
# the 10-minute limit; the tests JIT some 60 kernel variants):
#   bash scripts/sm90_fixed_ref.sh OUT_DIR tests   (steps 1-2: at most 200 + 150 + 150 s)
#   bash scripts/sm90_fixed_ref.sh OUT_DIR bench   (step 3: at most 3 x 120 s, ~4 minutes)
# or both in one (`all`, the default) where the time allows.
#
# 1. tests/gpu_fwd_sm90_scores: the fixed reference's cases (caps on both arms, rows whose
#    every score lies near -cap), then the shipping scored kernels (unchanged PTX);
# 2. memcheck on the fixed reference's cases (release build, shipping schedule);
# 3. bench, bf16, 3 interleaved rounds: plain, softcap on the running max (`main`, the
#    shipping kernel) and on the fixed reference (`fref`) at caps 30 and 50 (Gemma 2's:
#    its reference above 0), causal at d128 (8K, 16K) and d64 (8K), no mask at d128 (8K).
#    Prediction (d128 causal 8K, cap 30): softcap / plain 0.82 -> 0.90-0.95; d64 0.67 ->
#    0.75-0.85 (the clean loop 613 -> 446 SASS instructions, its `tanh`s and `ex2`s one
#    stream with no row max between them).
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_fixed_ref.sh OUT_DIR [tests|bench|all]}"
PHASE="${2:-all}"
mkdir -p "$OUT"
source scripts/device_steps.sh
if [[ "$PHASE" != bench ]]; then
step "1. gpu_fwd_sm90_scores"
timeout 200 tests/gpu_fwd_sm90_scores --nocapture sm90_softcap_on_a_fixed_reference \
  > "$OUT/fref.log" 2>&1
echo "fref rc=$?"; summary "$OUT/fref.log"
timeout 150 tests/gpu_fwd_sm90_scores --nocapture sm90_scored_forward > "$OUT/scores.log" 2>&1
echo "scores rc=$?"; summary "$OUT/scores.log"
step "2. memcheck: the fixed reference's cases"
GPU_FWD_SM90_SCORES_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --print-limit 10 \
  tests/gpu_fwd_sm90_scores \
  --nocapture sm90_softcap_on_a_fixed_reference > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; summary "$OUT/memcheck.log"
fi
[[ "$PHASE" == tests ]] && { step "done"; exit 0; }
step "3. the softcap on the fixed reference against the running max"
for row in "128 8192,16384 1" "64 8192 1" "128 8192 0"; do
  set -- $row
  B=BENCH_CAUSAL=$3,BENCH_PATH=sm90tst
  cfgs="plain:$B"
  for cap in 30 50; do
    cfgs="$cfgs main$cap:$B,BENCH_SOFTCAP=$cap fref$cap:$B,BENCH_SOFTCAP=$cap,BENCH_FIXED_REF=1"
  done
  # a quarter of the fixed reference's `ex2`s on the FMA pipe (its softmax one stream,
  # bound by the multi-function unit: 128 ops of 8 clocks per warp and block at d128)
  cfgs="$cfgs fref30fx1:$B,BENCH_SOFTCAP=30,BENCH_FIXED_REF=1,BENCH_FMA_EXP2=1"
  BENCH_DTYPE=bf16 BENCH_D=$1 BENCH_SEQ=$2 timeout 120 bash scripts/sm90_fwd_variants.sh \
    "$OUT/d$1_c$3" plain "$cfgs" "fref30=main30 fref50=main50 fref30fx1=fref30" 2>&1 |
    grep -v "^round"
done
step "done"
