#!/usr/bin/env bash
# One device command for session 32's two patches (docs/wip/README.md), beside main.
# Bundle (from a checkout of main; the working tree with tma-release-late applied, a
# branch with softcap-tanh-stream committed):
#
#   git switch -c wip-tanh && git apply docs/wip/softcap-tanh-stream.patch && \
#     git commit -qam wip && git switch main
#   git apply docs/wip/tma-release-late.patch
#   BUNDLE_REVS="main=main tanh=wip-tanh" BUNDLE_TESTS="gpu_fwd_sm90" bash scripts/bwd_bundle.sh
#   git checkout -- flash-codegen     # (the patch stays in docs/wip until it is measured)
#
# then on the device, from target/gb: `bash scripts/sm90_wip.sh OUT_DIR`:
#
# 1. tests/gpu_fwd_sm90 (this build: the Q slot released late) on the shipping schedule,
#    memcheck on four cases;
# 2. bench (bf16 d128 8K, 3 interleaved rounds): causal and windows 256 / 1024 / 4096,
#    this build (`rl`) beside main's;
# 3. bench (bf16 8K causal, cap 30): the softcap at d128 and d64, the tanh-stream build
#    beside main's, and main's without pingpong (`BENCH_SM90_PP=0`), each beside main's
#    plain causal kernel.
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_wip.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh
step "1. gpu_fwd_sm90 (Q slot released late), memcheck"
fwd_sm90_shipping 240 tma_store
step "2. the tile edge: this build against main"
cfgs=""
for b in rl main; do
  bin=bench_fwd; [ "$b" = main ] && bin=bench_fwd_main
  cfgs="$cfgs causal_$b:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BIN=$bin"
  for w in 256 1024 4096; do
    cfgs="$cfgs w${w}_$b:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=sm90tst,BIN=$bin"
  done
done
pairs="causal_rl=causal_main w256_rl=w256_main w1024_rl=w1024_main w4096_rl=w4096_main"
pairs="$pairs w256_main=causal_main w1024_main=causal_main w4096_main=causal_main"
BENCH_DTYPE=bf16 BENCH_D=128 BENCH_SEQ=8192 timeout 200 bash scripts/sm90_fwd_variants.sh \
  "$OUT/edge" causal_main "$cfgs" "$pairs" 2>&1 | grep -v "^round"
step "3. the softcap: tanh stream, no pingpong, against main"
S=BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BENCH_SOFTCAP=30
cfgs="plain:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BIN=bench_fwd_main main:$S,BIN=bench_fwd_main"
cfgs="$cfgs tanh:$S,BIN=bench_fwd_tanh npp:$S,BENCH_SM90_PP=0,BIN=bench_fwd_main"
for d in 128 64; do
  BENCH_DTYPE=bf16 BENCH_D=$d BENCH_SEQ=8192 timeout 110 bash scripts/sm90_fwd_variants.sh \
    "$OUT/softcap_d$d" plain "$cfgs" "tanh=main npp=main" 2>&1 | grep -v "^round"
done
step "done"
