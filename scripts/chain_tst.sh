#!/usr/bin/env bash
# The chained consumer with the TMA epilogue (`fwd::Variant::chained` + `tma_store`, bench
# path sm90ctst) against the shipping kernels (sm90tst), from target/gb after
# `BUNDLE_TESTS="gpu_fwd_sm90 ..." bash scripts/bwd_bundle.sh`:
#   1. gpu_fwd_sm90 on the chained schedule (its pair stores and its TMA epilogue; debug
#      builds first), then memcheck of shapes CHAIN_MEMCHECK_SHAPES (default 1,10,17: a
#      causal multi-tile GQA shape and the window's) on the release builds;
#   2. bench_fwd, 3 interleaved rounds, bf16 8K: d128 causal, no mask, windows 256 / 1024 /
#      4096 and d64 causal / window 1024, each beside the shipping kernel (ratio ctst /
#      tst per row) and the windows over the shipping causal kernel.
#
#   bash scripts/chain_tst.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: chain_tst.sh OUT_DIR}"
mkdir -p "$OUT"
GPU_FWD_SM90_SCHEDULES=5 timeout 120 tests/gpu_fwd_sm90 --nocapture > "$OUT/fwd.log" 2>&1
echo "gpu_fwd_sm90 (chained) rc=$? (${SECONDS}s)"
grep -E "test result|error / sm80|FAIL|panicked" "$OUT/fwd.log" | tail -5
GPU_FWD_SM90_SCHEDULES=5 GPU_FWD_SM90_SHAPES="${CHAIN_MEMCHECK_SHAPES:-1,10,17}" timeout 80 \
  compute-sanitizer --tool memcheck --print-limit 10 tests/gpu_fwd_sm90 --nocapture > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? (${SECONDS}s)"
grep -E "ERROR SUMMARY|test result" "$OUT/memcheck.log" | tail -3
cfgs=""
for p in tst ctst; do
  cfgs="$cfgs causal_$p:BENCH_PATH=sm90$p,BENCH_CAUSAL=1 plain_$p:BENCH_PATH=sm90$p,BENCH_CAUSAL=0"
  for w in 256 1024 4096; do cfgs="$cfgs w${w}_$p:BENCH_PATH=sm90$p,BENCH_CAUSAL=0,BENCH_WINDOW=$w"; done
done
pairs="causal_ctst=causal_tst plain_ctst=plain_tst w256_ctst=w256_tst w1024_ctst=w1024_tst w4096_ctst=w4096_tst"
BENCH_D=128 BENCH_SEQ=8192 BENCH_DTYPE=bf16 bash scripts/sm90_fwd_variants.sh "$OUT/d128" causal_tst "$cfgs" "$pairs"
cfgs=""
for p in tst ctst; do
  cfgs="$cfgs causal_$p:BENCH_PATH=sm90$p,BENCH_CAUSAL=1 w1024_$p:BENCH_PATH=sm90$p,BENCH_CAUSAL=0,BENCH_WINDOW=1024"
done
BENCH_D=64 BENCH_SEQ=8192 BENCH_DTYPE=bf16 bash scripts/sm90_fwd_variants.sh "$OUT/d64" causal_tst "$cfgs" \
  "causal_ctst=causal_tst w1024_ctst=w1024_tst"
