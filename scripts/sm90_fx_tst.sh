#!/usr/bin/env bash
# One device command for the softcap's FMA share and the TMA epilogue (issue 19), most
# needed first, each step under its own timeout and logged under OUT (from target/gb,
# bundle `BUNDLE_TESTS="gpu_fwd_sm90_scores gpu_fwd_sm90" bash scripts/bwd_bundle.sh`):
#
# 1. tests/gpu_fwd_sm90_scores (the softcap with fma_exp2 0, 1, 2, 4 against float64);
# 2. scripts/sm90_softcap_fma.sh (each share's time over the plain twin; d64 and d128);
# 3. tests/gpu_fwd_sm90 on the shipping schedule with and without the TMA epilogue
#    (debug and release builds), memcheck on a few of its cases;
# 4. scripts/sm90_window_edges.sh with sm90tst beside sm90dyn (8K: causal, 1024, 4096);
# 5. scripts/sm90_ncu_window.sh (where the 1024-key window's time goes).
#
#   bash scripts/sm90_fx_tst.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_fx_tst.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh

step "1. gpu_fwd_sm90_scores"
timeout 100 tests/gpu_fwd_sm90_scores --nocapture > "$OUT/scores.log" 2>&1
echo "rc=$?"; summary "$OUT/scores.log"
echo "fma_exp2 1/2/4 cases: $(grep -cE 'fma_exp2: Some\([124]\)' "$OUT/scores.log")"

step "2. softcap FMA shares"
BENCH_SEQ=8192,16384 timeout 160 bash scripts/sm90_softcap_fma.sh "$OUT/fma" 2>&1 | grep -v "^round"

step "3. gpu_fwd_sm90, shipping schedule, pair stores and TMA epilogue"
fwd_sm90_shipping 90 tma_store

step "4. window edges, sm90tst beside sm90dyn"
BENCH_SEQ=8192 WINDOWS="1024 4096" PATHS="sm90dyn sm90tst" timeout 90 \
  bash scripts/sm90_window_edges.sh "$OUT/edges" 2>&1 | grep -v "^round"

step "5. ncu"
timeout 90 bash scripts/sm90_ncu_window.sh "$OUT/ncu" 2>&1 | cut -c1-200 | head -90
step "done"
