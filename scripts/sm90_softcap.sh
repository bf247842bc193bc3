#!/usr/bin/env bash
# Device commands for the softcap's maxima from the raw products and its branch-free
# reference (`OnlineSoftmax::step_deferred_from`, session 32) and the window's masks per
# edge (`_em`, session 31), beside the build before them (bundle: `BUNDLE_REVS="base=REV"
# BUNDLE_TESTS="gpu_fwd_sm90 gpu_fwd_sm90_scores" bash scripts/bwd_bundle.sh`; run from
# target/gb). Two steps, each one device command:
#
#   softcap: tests/gpu_fwd_sm90_scores (the softcap with every FMA share, a q x 8 case
#            whose reference moves in clean blocks; ALiBi); bench (bf16, 3 interleaved
#            rounds) of the softcap (cap 30, causal) at d128 and d64, 8K: this build's
#            FMA shares 0, 1, 2 and the base build's shipping kernel, beside the plain
#            causal kernel (its cost).
#   edges:   tests/gpu_fwd_sm90 on the shipping schedule (with `_tst_em` on every window
#            case) and memcheck on four of its cases; bench of windows 256 / 1024 / 4096
#            at 8K (16K too with SEQ=8192,16384) with and without `_em`, beside the causal
#            kernel.
#
#   bash scripts/sm90_softcap.sh softcap|edges OUT_DIR
set -u
cd "$(dirname "$0")/.."
WHAT="${1:?usage: sm90_softcap.sh softcap|edges OUT_DIR}"
OUT="${2:?usage: sm90_softcap.sh softcap|edges OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh
if [ "$WHAT" = softcap ]; then
  step "gpu_fwd_sm90_scores"
  timeout 240 tests/gpu_fwd_sm90_scores --nocapture > "$OUT/scores.log" 2>&1
  echo "scores rc=$?"; summary "$OUT/scores.log"
  grep -c "amp: 8" "$OUT/scores.log" | sed 's/^/q x 8 cases: /'
  step "softcap: FMA shares 0, 1, 2 and the base build's kernel, beside plain causal"
  cfgs="plain:BENCH_CAUSAL=1,BENCH_PATH=sm90tst"
  cfgs="$cfgs base:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BENCH_SOFTCAP=30,BIN=bench_fwd_base"
  for k in 0 1 2; do
    cfgs="$cfgs fx$k:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BENCH_SOFTCAP=30,BENCH_FMA_EXP2=$k"
  done
  pairs="fx0=base fx1=base fx2=base"
  for d in 128 64; do
    BENCH_DTYPE=bf16 BENCH_D=$d BENCH_SEQ=8192 timeout 140 bash scripts/sm90_fwd_variants.sh \
      "$OUT/softcap_d$d" plain "$cfgs" "$pairs" 2>&1 | grep -v "^round"
  done
else
  step "gpu_fwd_sm90 shipping schedule (with _em on the windows), memcheck"
  fwd_sm90_shipping 240 edge_masks
  step "windows with and without one mask pass per edge"
  cfgs="causal:BENCH_CAUSAL=1,BENCH_PATH=sm90tst"
  pairs=""
  for w in 256 1024 4096; do
    cfgs="$cfgs w${w}:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=sm90tst"
    cfgs="$cfgs w${w}_em:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=sm90tst,BENCH_EDGE_MASKS=1"
    pairs="$pairs w${w}_em=w${w}"
  done
  BENCH_DTYPE=bf16 BENCH_D=128 BENCH_SEQ=${SEQ:-8192} timeout 250 bash scripts/sm90_fwd_variants.sh \
    "$OUT/edges" causal "$cfgs" "$pairs" 2>&1 | grep -v "^round"
fi
step "done"
