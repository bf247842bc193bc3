#!/usr/bin/env bash
# One device command for docs/wip/sm80-tensor-sums.patch (the sm_80 forward's row sums on
# the tensor cores, session 39) beside main. Bundle, with the patch applied in the tree:
# BUNDLE_DIR=target/gb4 BUNDLE_TESTS="gpu_fwd gpu_window gpu_varlen gpu_varlen_modifiers"
# BUNDLE_REVS="base=main" bash scripts/bwd_bundle.sh;  then from target/gb4:
#   bash scripts/sm80_tensor_sums.sh OUT_DIR tests   (steps 1-2, at most 9 minutes)
#   bash scripts/sm80_tensor_sums.sh OUT_DIR bench   (step 3, at most ~4 minutes)
# as two device commands (`all`, the default, runs both where the time allows).
#
# 1. the sm_80 forward's GPU tests with the patch (FLASH_PTX_TEST_FWD_ARCH=sm80: d64 and
#    d128 would run the sm_90a forward on Hopper): gpu_fwd (every head dim, both dtypes,
#    causal, GQA, odd lengths), gpu_window (windows, softcap, ALiBi), gpu_varlen and
#    gpu_varlen_modifiers (the varlen kernels change too);
# 2. memcheck on gpu_varlen (the varlen kernels: sequence ends inside blocks);
# 3. bench, causal 8K, 3 interleaved rounds, the sm_80 path, this build (`ts`) against
#    main's (`base`): bf16 plain and softcap 30 at d64 and d128, f16 plain at d128.
#    Prediction: ts / base 1.01-1.03 at d128, 1.03-1.06 at d64 (the d64 kernel's 76 FADD
#    and 16 SHFL -> 4 and 8 in static SASS, 8 more HMMA; d128's 44 -> 4, 4 more HMMA);
#    the tests' errors within 1.02x of main's (the same P, divided by its rounded sum).
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm80_tensor_sums.sh OUT_DIR [tests|bench|all]}"
PHASE="${2:-all}"
mkdir -p "$OUT"
source scripts/device_steps.sh
if [[ "$PHASE" != bench ]]; then
step "1. tests (sm_80 kernels)"
for t in gpu_fwd:120 gpu_window:120 gpu_varlen:100 gpu_varlen_modifiers:100; do
  FLASH_PTX_TEST_FWD_ARCH=sm80 timeout ${t#*:} tests/${t%:*} > "$OUT/${t%:*}.log" 2>&1
  echo "${t%:*} rc=$?"; summary "$OUT/${t%:*}.log"
done
step "2. memcheck: gpu_varlen"
FLASH_PTX_TEST_FWD_ARCH=sm80 timeout 90 compute-sanitizer --tool memcheck --print-limit 10 \
  tests/gpu_varlen > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; summary "$OUT/memcheck.log"
fi
[[ "$PHASE" == tests ]] && { step "done"; exit 0; }
step "3. bench: tensor-core row sums against main"
for row in "bf16 64" "bf16 128" "f16 128"; do
  set -- $row
  B=BENCH_CAUSAL=1,BENCH_PATH=sm80
  cfgs="base:$B,BIN=bench_fwd_base ts:$B"
  [[ $1 == bf16 ]] && cfgs="$cfgs base30:$B,BENCH_SOFTCAP=30,BIN=bench_fwd_base ts30:$B,BENCH_SOFTCAP=30"
  BENCH_DTYPE=$1 BENCH_D=$2 BENCH_SEQ=8192 timeout 90 bash scripts/sm90_fwd_variants.sh \
    "$OUT/$1_d$2" base "$cfgs" "ts30=base30" 2>&1 | grep -v "^round"
done
step "done"
