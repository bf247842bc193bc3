#!/usr/bin/env bash
# The paged KV-cache GPU run, in one command from a gpu-bundle (cargo xtask gpu-bundle):
# the Rust paged tests (tests/gpu_kvcache_paged), the contiguous KV-cache tests
# (tests/gpu_kvcache: the runtime path they share), the paged-vs-contiguous bench
# (examples/bench_paged, 3 runs of 3 interleaved rounds; the bars: scripts/paged_bars.py)
# and, where compute-sanitizer is on PATH and
# the bundle has ptx-out/, memcheck of the manifest-driven paged check with garbage
# tables under exact allocations.
# Usage: bash scripts/paged_all.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: paged_all.sh OUT_DIR}"
mkdir -p "$OUT"
timeout 200 tests/gpu_kvcache_paged --test-threads=1 --nocapture > "$OUT/gpu_kvcache_paged.log" 2>&1
echo "gpu_kvcache_paged rc=$?"; grep -E "cases in|test result|FAIL" "$OUT/gpu_kvcache_paged.log" | head -20
timeout 150 tests/gpu_kvcache --test-threads=1 --nocapture > "$OUT/gpu_kvcache.log" 2>&1
echo "gpu_kvcache rc=$?"; grep -E "cases in|test result" "$OUT/gpu_kvcache.log"
for i in 1 2 3; do
  BENCH_OUT="$OUT/bench_paged_$i.jsonl" timeout 120 examples/bench_paged > /dev/null 2> "$OUT/bench_paged_$i.err"
  echo "bench_paged run $i rc=$?"
done
python3 scripts/paged_bars.py "$OUT"/bench_paged_[123].jsonl > "$OUT/paged_bars.txt" 2>&1
echo "bars rc=$?"; cat "$OUT/paged_bars.txt"
timeout 100 python3 scripts/gpu_check_paged.py ptx-out > "$OUT/check_paged.txt" 2>&1
echo "check_paged rc=$? ($(grep -c '^ok' "$OUT/check_paged.txt") ok, $(grep -c '^FAIL' "$OUT/check_paged.txt") failed)"
if command -v compute-sanitizer > /dev/null && [ -d ptx-out ]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --print-limit 20 \
    python3 scripts/gpu_check_paged.py ptx-out --subset > "$OUT/memcheck_paged.txt" 2>&1
  echo "memcheck_paged rc=$? ($(grep -c '^ok' "$OUT/memcheck_paged.txt") ok): $(grep 'ERROR SUMMARY' "$OUT/memcheck_paged.txt" | tail -1)"
fi
