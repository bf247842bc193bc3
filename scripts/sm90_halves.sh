#!/usr/bin/env bash
# One device command for session 33's half blocks (`fwd_products`: a masked block half
# unseen by a consumer warpgroup's rows runs its products on the seen half) and the
# windowed backward's tile row. Bundle (from a branch with docs/wip/half-blocks.patch
# applied and committed; `wip-b`: the same with the P V halves in the clean loop too, the
# `masked.is_some()` filter on `pv_unseen` in `steady_blocks` dropped):
#
#   BUNDLE_REVS="main=main b=wip-b" BUNDLE_EXAMPLES=bench_window \
#     BUNDLE_TESTS="gpu_fwd_sm90 gpu_fwd_sm90_scores" bash scripts/bwd_bundle.sh
#
# then on the device, from target/gb: `bash scripts/sm90_halves.sh OUT_DIR`:
#
# 1. tests/gpu_fwd_sm90 on the shipping schedule and memcheck on four cases (this build);
# 2. tests/gpu_fwd_sm90_scores (softcap and ALiBi: the bias on a half's keys);
# 3. bench (bf16 d128 8K, 3 interleaved rounds): causal and windows 256 / 1024 / 4096,
#    this build (`hb`), `b` and main's; d64 causal and w1024, this build and main's;
# 4. the windowed backward (examples/bench_window, bf16 d128, 8K and 32K: causal and
#    windows 256 / 1024 / 4096) on the standard tile row and on the long one.
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_halves.sh OUT_DIR}"
mkdir -p "$OUT"
source scripts/device_steps.sh
step "1. gpu_fwd_sm90 (half blocks), memcheck"
fwd_sm90_shipping 200 tma_store
step "2. gpu_fwd_sm90_scores"
fwd_sm90_scores 150
step "3. half blocks against main"
cfgs=""
for b in hb b main; do
  bin=bench_fwd; [ "$b" != hb ] && bin=bench_fwd_$b
  cfgs="$cfgs causal_$b:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BIN=$bin"
  for w in 256 1024 4096; do
    cfgs="$cfgs w${w}_$b:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=sm90tst,BIN=$bin"
  done
done
pairs="causal_hb=causal_main w256_hb=w256_main w1024_hb=w1024_main w4096_hb=w4096_main"
pairs="$pairs causal_b=causal_main w256_b=w256_main w1024_b=w1024_main w4096_b=w4096_main"
pairs="$pairs w256_hb=causal_hb w1024_hb=causal_hb w4096_hb=causal_hb"
BENCH_DTYPE=bf16 BENCH_D=128 BENCH_SEQ=8192 timeout 200 bash scripts/sm90_fwd_variants.sh \
  "$OUT/edge" causal_main "$cfgs" "$pairs" 2>&1 | grep -v "^round"
cfgs=""
for b in hb main; do
  bin=bench_fwd; [ "$b" != hb ] && bin=bench_fwd_$b
  cfgs="$cfgs causal_$b:BENCH_CAUSAL=1,BENCH_PATH=sm90tst,BIN=$bin"
  cfgs="$cfgs w1024_$b:BENCH_CAUSAL=0,BENCH_WINDOW=1024,BENCH_PATH=sm90tst,BIN=$bin"
done
BENCH_DTYPE=bf16 BENCH_D=64 BENCH_SEQ=8192 timeout 60 bash scripts/sm90_fwd_variants.sh \
  "$OUT/edge64" causal_main "$cfgs" "w1024_hb=w1024_main w1024_main=causal_main" 2>&1 \
  | grep -v "^round"
step "4. the windowed backward: standard and long tile rows"
for t in standard long; do
  BENCH_PASS=bwd BENCH_BWD_TILING=$t BENCH_ROWS=causal,window256,window1024,window4096 \
    timeout 70 examples/bench_window > "$OUT/bwd_$t.jsonl" 2> "$OUT/bwd_$t.err"
  echo "bwd $t rc=$?"
  python3 scripts/bench_window_rows.py "$OUT/bwd_$t.jsonl"
done
step "done"
