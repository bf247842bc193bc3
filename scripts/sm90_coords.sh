#!/usr/bin/env bash
# One device command for the consumers' tile coordinates decoded by the producer
# (`fwd_dynamic::TILE_COORDS`, session 31) beside the build before it, and the checks of
# the shipping kernels with the TMA epilogue (bundle: `BUNDLE_REVS="base=REV"
# BUNDLE_TESTS="gpu_fwd_sm90 gpu_fwd_sm90_scores gpu_fwd_select gpu_embed_sm90 gpu_streams"
# bash scripts/bwd_bundle.sh`; run from target/gb), each step under its own limit:
#
# 1. tests/gpu_fwd_sm90 on the shipping schedule (pair stores, `_tst`, `_tst_qa`) and
#    memcheck; tests/gpu_streams;
# 2. tests/gpu_fwd_sm90_scores (softcap and ALiBi, now with the TMA epilogue), gpu_fwd_select,
#    gpu_embed_sm90, scripts/manifest_sm90.py and manifest_sm90_scores.py (ptx-sm90a);
# 3. bench (bf16, 3 interleaved rounds): d128 8K / 16K causal, windows 256 and 1024, no
#    mask; d64 causal and no mask; each with this build (`_new`) and the base (`_base`).
#
#   bash scripts/sm90_coords.sh OUT_DIR   (SKIP_CHECKS=1: step 3 only)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_coords.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh
if [ -z "${SKIP_CHECKS:-}" ]; then
  step "1. gpu_fwd_sm90 shipping schedule, memcheck, streams"
  fwd_sm90_shipping 130 tma_store
  timeout 40 tests/gpu_streams --nocapture > "$OUT/streams.log" 2>&1
  echo "streams rc=$?"; summary "$OUT/streams.log"
  step "2. scores, select, embed, manifests"
  for t in "gpu_fwd_sm90_scores 150" "gpu_fwd_select 60" "gpu_embed_sm90 40"; do
    set -- $t
    timeout "$2" "tests/$1" --nocapture > "$OUT/$1.log" 2>&1
    echo "$1 rc=$?"; summary "$OUT/$1.log"
  done
  for m in manifest_sm90 manifest_sm90_scores; do
    timeout 60 python3 "scripts/$m.py" ptx-sm90a > "$OUT/$m.log" 2>&1
    echo "$m rc=$?"; grep -E "ALL OK|SOME|FAIL|Error" "$OUT/$m.log" | tail -3
  done
fi
step "3. bench: this build against the base"
cfgs=""
for b in new base; do
  bin=bench_fwd; [ "$b" = base ] && bin=bench_fwd_base
  cfgs="$cfgs causal_$b:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BIN=$bin"
  cfgs="$cfgs c0_$b:BENCH_CAUSAL=0,BENCH_PATH=sm90tst,BIN=$bin"
  for w in 256 1024; do
    cfgs="$cfgs w${w}_$b:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=sm90tst,BIN=$bin"
  done
done
pairs="causal_base=causal_new c0_base=c0_new w256_new=causal_new w1024_new=causal_new"
pairs="$pairs w256_base=causal_base w1024_base=causal_base"
BENCH_DTYPE=bf16 BENCH_D=128 BENCH_SEQ=8192,16384 timeout 200 bash scripts/sm90_fwd_variants.sh \
  "$OUT/d128" causal_new "$cfgs" "$pairs" 2>&1 | grep -v "^round"
cfgs=$(echo "$cfgs" | tr ' ' '\n' | grep -E "^(causal|c0)_" | tr '\n' ' ')
BENCH_DTYPE=bf16 BENCH_D=64 BENCH_SEQ=8192 timeout 100 bash scripts/sm90_fwd_variants.sh \
  "$OUT/d64" causal_new "$cfgs" "$pairs" 2>&1 | grep -v "^round"
step "done"
