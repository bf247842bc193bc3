#!/usr/bin/env bash
# Session 39: the fixed reference's GPU test, memcheck, then a short bench, in one command
# (the most needed first: each step bounded so that the whole fits LIMIT seconds).
set -u
cd "$(dirname "$0")"
OUT="${1:?}"; LIMIT="${2:-560}"; mkdir -p "$OUT"
source scripts/device_steps.sh
step "1. fref test"
timeout 200 tests/gpu_fwd_sm90_scores --nocapture sm90_softcap_on_a_fixed_reference > "$OUT/fref.log" 2>&1
echo "fref rc=$?"; summary "$OUT/fref.log"
bench() {
  local d=$1 B=BENCH_CAUSAL=1,BENCH_PATH=sm90tst
  local cfgs="plain:$B"
  for cap in 30 50; do
    cfgs="$cfgs main$cap:$B,BENCH_SOFTCAP=$cap fref$cap:$B,BENCH_SOFTCAP=$cap,BENCH_FIXED_REF=1"
  done
  BENCH_DTYPE=bf16 BENCH_D=$d BENCH_SEQ=8192 timeout "$2" bash scripts/sm90_fwd_variants.sh \
    "$OUT/d${d}_c1" plain "$cfgs" "fref30=main30 fref50=main50" 2>&1 | grep -v "^round"
}
step "2. bench d128"; bench 128 110
step "3. memcheck"
GPU_FWD_SM90_SCORES_QUICK=1 timeout 90 compute-sanitizer --tool memcheck --print-limit 10 \
  tests/gpu_fwd_sm90_scores --nocapture sm90_softcap_on_a_fixed_reference > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; summary "$OUT/memcheck.log"
left=$(( LIMIT - SECONDS ))
step "4. bench d64 ($left s left)"
[[ $left -gt 40 ]] && bench 64 $(( left - 5 ))
step done
