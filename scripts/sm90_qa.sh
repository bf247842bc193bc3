#!/usr/bin/env bash
# One device command for the next tile's Q loaded early (`_qa`) beside the TMA epilogue
# (`_tst`) and the shipping kernel (issue 19's short windows), most needed first, each step
# under its own limit (from target/gb, bundle `BUNDLE_TESTS="gpu_fwd_sm90" bash
# scripts/bwd_bundle.sh`):
#
# 1. tests/gpu_fwd_sm90 on the shipping schedule: pair stores, `_tst`, `_tst_qa` (debug
#    and release builds); memcheck on a few cases;
# 2. the windows (8K and 16K: causal, 256, 1024) on sm90dyn, sm90tst, sm90qa;
# 3. the plain rows (causal and not, d64 and d128, 8K and 16K) on the same three;
# 4. ncu on the qa kernels (the Q-full wait at the tile edge should be gone).
#
#   bash scripts/sm90_qa.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_qa.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh

step "1. gpu_fwd_sm90, shipping schedule: pair stores, _tst, _tst_qa"
fwd_sm90_shipping 150 q_ahead

step "2. windows"
BENCH_SEQ=8192,16384 WINDOWS="256 1024" PATHS="sm90dyn sm90tst sm90qa" timeout 170 \
  bash scripts/sm90_window_edges.sh "$OUT/edges" 2>&1 | grep -v "^round"

step "3. plain rows"
cfgs=""
for c in 0 1; do for p in sm90dyn sm90tst sm90qa; do cfgs="$cfgs ${p}_c$c:BENCH_CAUSAL=$c,BENCH_PATH=$p"; done; done
BENCH_DTYPE=bf16 BENCH_D=64,128 BENCH_SEQ=8192,16384 timeout 150 bash scripts/sm90_fwd_variants.sh \
  "$OUT/plain" sm90dyn_c0 "$cfgs" "sm90tst_c1=sm90dyn_c1 sm90qa_c1=sm90dyn_c1" 2>&1 | grep -v "^round"

step "4. ncu on the qa kernels"
NCU_PATH=sm90qa timeout 70 bash scripts/sm90_ncu_window.sh "$OUT/ncu" 2>&1 | cut -c1-200 | head -70
step "done"
