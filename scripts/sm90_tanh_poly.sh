#!/usr/bin/env bash
# One device command for the softcap's tanh on the FMA pipe (`kernels/tanh.rs`,
# `ScoreTransform::apply_split`, session 33) beside main. Bundle, from the working tree
# with the change:  BUNDLE_REVS="main=main" BUNDLE_TESTS="gpu_fwd_sm90_scores" bash
# scripts/bwd_bundle.sh;  then from target/gb:  bash scripts/sm90_tanh_poly.sh OUT_DIR
#
# 1. tests/gpu_fwd_sm90_scores (this build: softcap and ALiBi against the float64
#    reference; its q x 8, cap 50 cases put blocks on both arms);
# 2. bench (bf16 8K causal, cap 30, 3 interleaved rounds) at d128 and d64: this build's
#    softcap (`poly`) and main's, beside main's plain causal kernel.
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_tanh_poly.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh
step "1. gpu_fwd_sm90_scores"
fwd_sm90_scores 150
step "2. the softcap: tanh on the FMA pipe against main"
B=BENCH_CAUSAL=1,BENCH_PATH=sm90tst
cfgs="plain:$B,BIN=bench_fwd_main main:$B,BENCH_SOFTCAP=30,BIN=bench_fwd_main poly:$B,BENCH_SOFTCAP=30"
for d in 128 64; do
  BENCH_DTYPE=bf16 BENCH_D=$d BENCH_SEQ=8192 timeout 60 bash scripts/sm90_fwd_variants.sh \
    "$OUT/softcap_d$d" plain "$cfgs" "poly=main" 2>&1 | grep -v "^round"
done
step "done"
