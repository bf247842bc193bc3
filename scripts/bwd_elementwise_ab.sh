#!/usr/bin/env bash
# One device command for a change to the backward's elementwise passes (BwdPre, BwdPost;
# docs/wip/bwd-elementwise-rows.patch): the backward GPU tests of this build, both
# builds' pass times under Nsight Compute (window 1024 and causal, 8K), then the windowed
# backward A/B (scripts/bwd_window_ab.sh, 3 interleaved runs at 8K, or at each of NS). About
# 6 minutes; any main-pass change too (session 36: the L2 prefetch, TESTS, NS).
#
#   BUNDLE_TESTS="gpu_bwd gpu_varlen gpu_window_bwd" BUNDLE_EXAMPLES=bench_window \
#     BUNDLE_REVS="base=main" BUNDLE_REV_EXAMPLES=bench_window bash scripts/bwd_bundle.sh
#   bash scripts/bwd_elementwise_ab.sh OUT_DIR    (from target/gb, on the GPU machine)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: bwd_elementwise_ab.sh OUT_DIR}"
mkdir -p "$OUT"
for t in ${TESTS:-gpu_bwd gpu_varlen gpu_window_bwd}; do
  start=$(date +%s)
  timeout 240 "tests/$t" > "$OUT/$t.log" 2>&1
  echo "== $t rc=$? $(( $(date +%s) - start )) s: $(grep -E '^test result' "$OUT/$t.log")"
  grep -E "FAILED|panicked" "$OUT/$t.log" | head -5
done
for build in new base; do
  exe=examples/bench_window; [ "$build" = base ] && exe=examples/bench_window_base
  echo "#### pass times: $build"
  EXE=$exe ROWS="window1024 causal" BENCH_N=8192 bash scripts/bwd_pass_times.sh "$OUT/passes_$build"
done
echo "#### windowed backward A/B"
NS="${NS:-8192}" bash scripts/bwd_window_ab.sh "$OUT/ab"
