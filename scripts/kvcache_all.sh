#!/usr/bin/env bash
# The KV-cache forward's GPU run, in one command from a gpu-bundle (cargo xtask
# gpu-bundle): the bench (ours through the public call, examples/bench_kvcache, and the
# peers + read ceiling, scripts/bench_kvcache.py, interleaved 3 times), the bars
# (scripts/kvcache_bars.py), the GPU tests, the manifest-only check, and compute-sanitizer
# memcheck (exact allocations) and racecheck on a named subset.
# Usage: bash scripts/kvcache_all.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: kvcache_all.sh OUT_DIR}"
mkdir -p "$OUT"
for i in 1 2 3; do
  BENCH_OUT="$OUT/ours_$i.jsonl" timeout 90 examples/bench_kvcache > /dev/null 2> "$OUT/ours_$i.err"
  echo "ours run $i rc=$?"
  timeout 120 python3 scripts/bench_kvcache.py ptx-out "$OUT/peers_$i.json" > "$OUT/peers_$i.log" 2>&1
  echo "peers run $i rc=$?"
done
python3 scripts/kvcache_bars.py "$OUT" > "$OUT/bars.txt" 2>&1; echo "bars rc=$?"
timeout 150 tests/gpu_kvcache --test-threads=1 --nocapture > "$OUT/gpu_kvcache.log" 2>&1
echo "gpu_kvcache rc=$?"; grep -E "cases in|test result" "$OUT/gpu_kvcache.log"
timeout 60 python3 scripts/gpu_check_kvcache.py ptx-out --quick > "$OUT/check_quick.txt" 2>&1
echo "manifest check rc=$? ($(grep -c '^ok' "$OUT/check_quick.txt") ok)"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 20 \
    python3 scripts/gpu_check_kvcache.py ptx-out --subset > "$OUT/$tool.txt" 2>&1
  echo "$tool rc=$? ($(grep -c '^ok' "$OUT/$tool.txt") ok): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.txt" | tail -1)"
done
