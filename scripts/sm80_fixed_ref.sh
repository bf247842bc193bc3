#!/usr/bin/env bash
# One device command for docs/wip/sm80-fixed-ref.patch (the sm_80 forward's bf16 softcap
# kernels on the fixed softmax reference, session 38) beside main. Bundle, with the patch
# applied in the tree: BUNDLE_DIR=target/gb3 BUNDLE_TESTS="gpu_window gpu_varlen_modifiers"
# BUNDLE_REVS="base=main" bash scripts/bwd_bundle.sh;  then from target/gb3:
#   bash scripts/sm80_fixed_ref.sh OUT_DIR   (about 5 minutes)
#
# 1. tests/gpu_window's softcap cases (caps 0.7, 5, 50 on the fixed arm, 60 on the running
#    one; every head dim, both dtypes, the 99 KiB d256 kernels too) on the sm_80 kernels
#    (FLASH_PTX_TEST_FWD_ARCH=sm80: d64 and d128 would run the sm_90a forward on Hopper),
#    and tests/gpu_varlen_modifiers (the varlen softcap kernels);
# 2. bench, bf16 causal 8K, 3 interleaved rounds, the sm_80 path: plain, this build's
#    softcap (`fref`) and main's (`main`) at caps 30 and 50, d128 and d256. Prediction:
#    fref / main 1.03-1.10 (the loops 747 -> 517 / 1052 -> 856 SASS instructions, the
#    row max's chain gone; the sm_80 kernel is one warp per scheduler at d128, so that
#    chain's latency is not hidden by other warps).
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm80_fixed_ref.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh
step "1. gpu_window (softcap, sm_80 kernels), gpu_varlen_modifiers"
FLASH_PTX_TEST_FWD_ARCH=sm80 timeout 150 tests/gpu_window softcapped > "$OUT/window.log" 2>&1
echo "window rc=$?"; summary "$OUT/window.log"
FLASH_PTX_TEST_FWD_ARCH=sm80 timeout 120 tests/gpu_varlen_modifiers > "$OUT/varlen.log" 2>&1
echo "varlen rc=$?"; summary "$OUT/varlen.log"
step "2. the sm_80 softcap on the fixed reference against main's"
for d in 128 256; do
  B=BENCH_CAUSAL=1,BENCH_PATH=sm80
  cfgs="plain:$B,BIN=bench_fwd_base"
  for cap in 30 50; do
    cfgs="$cfgs main$cap:$B,BENCH_SOFTCAP=$cap,BIN=bench_fwd_base fref$cap:$B,BENCH_SOFTCAP=$cap"
  done
  BENCH_DTYPE=bf16 BENCH_D=$d BENCH_SEQ=8192 timeout 120 bash scripts/sm90_fwd_variants.sh \
    "$OUT/d$d" plain "$cfgs" "fref30=main30 fref50=main50" 2>&1 | grep -v "^round"
done
step "done"
