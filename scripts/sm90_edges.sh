#!/usr/bin/env bash
# One device command for the window's masks per edge (`fwd::Variant::edge_masks`, `_em`;
# session 31, not yet run on a GPU) beside the shipping kernel (bundle:
# `BUNDLE_TESTS="gpu_fwd_sm90" bash scripts/bwd_bundle.sh`; run from target/gb):
#
# 1. tests/gpu_fwd_sm90 on the shipping schedule (pair stores, `_tst`, `_tst_qa`, and
#    `_tst_em` on the window cases; debug and release) and memcheck;
# 2. bench (bf16 d128, 3 interleaved rounds, 8K and 16K): the causal kernel and windows
#    256, 1024, 4096 with and without `_em` (TFLOP/s on unmasked pairs; `_em` over
#    `_tst` on each window).
#
#   bash scripts/sm90_edges.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_edges.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh
step "1. gpu_fwd_sm90 shipping schedule (with _em on the windows), memcheck"
fwd_sm90_shipping 200 edge_masks
step "2. windows with and without one mask pass per edge"
cfgs="causal:BENCH_CAUSAL=1,BENCH_PATH=sm90tst"
pairs=""
for w in 256 1024 4096; do
  cfgs="$cfgs w${w}:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=sm90tst"
  cfgs="$cfgs w${w}_em:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=sm90tst,BENCH_EDGE_MASKS=1"
  pairs="$pairs w${w}_em=w${w}"
done
BENCH_DTYPE=bf16 BENCH_D=128 BENCH_SEQ=8192,16384 timeout 250 bash scripts/sm90_fwd_variants.sh \
  "$OUT/edges" causal "$cfgs" "$pairs" 2>&1 | grep -v "^round"
step "done"
