#!/usr/bin/env bash
# One device command for the window's masks per edge (`fwd::Variant::edge_masks`, `_em`;
# session 31, not yet run on a GPU) beside the shipping kernel (bundle:
# `BUNDLE_TESTS="gpu_fwd_sm90" bash scripts/bwd_bundle.sh`; run from target/gb):
#
# 1. tests/gpu_fwd_sm90 on the shipping schedule (pair stores, `_tst`, `_tst_qa`, and
#    `_tst_em` on the window cases; debug and release) and memcheck;
# 2. bench (bf16 d128, 3 interleaved rounds, 8K and 16K): the causal kernel and windows
#    256, 1024, 4096 with and without `_em` (TFLOP/s on unmasked pairs; `_em` over
#    `_tst` on each window);
# 3. the softcap's FMA share: ncu of `_fx0` and `_fx1` (d128 bf16 8K causal, cap 30) and
#    their TFLOP/s beside the plain causal kernel (why moving `ex2`s off the MUFU loses).
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
step "3. softcap: ncu and bench of the FMA share 0 and 1"
NCU_CFGS="fx0:BENCH_CAUSAL=1,BENCH_SOFTCAP=30,BENCH_FMA_EXP2=0 fx1:BENCH_CAUSAL=1,BENCH_SOFTCAP=30,BENCH_FMA_EXP2=1" \
  timeout 90 bash scripts/sm90_ncu_window.sh "$OUT/ncu_fx" 2>&1 | cut -c1-200 | grep -v "^    [0-9.]*% 0x" | head -60
cfgs="plain:BENCH_CAUSAL=1,BENCH_PATH=sm90tst"
for k in 0 1 2; do
  cfgs="$cfgs fx$k:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BENCH_SOFTCAP=30,BENCH_FMA_EXP2=$k"
done
BENCH_DTYPE=bf16 BENCH_D=128 BENCH_SEQ=8192 timeout 80 bash scripts/sm90_fwd_variants.sh \
  "$OUT/fx" plain "$cfgs" 2>&1 | grep -v "^round"
step "done"
