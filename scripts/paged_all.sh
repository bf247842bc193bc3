#!/usr/bin/env bash
# The paged KV-cache GPU run, in one command from a gpu-bundle (cargo xtask gpu-bundle):
# the Rust paged tests (tests/gpu_kvcache_paged), the contiguous KV-cache tests
# (tests/gpu_kvcache: the runtime path they share), the paged-vs-contiguous bench
# (examples/bench_paged, 3 interleaved rounds) and, where compute-sanitizer is on PATH and
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
BENCH_OUT="$OUT/bench_paged.jsonl" timeout 200 examples/bench_paged > /dev/null 2> "$OUT/bench_paged.err"
echo "bench_paged rc=$?"; cat "$OUT/bench_paged.err"
python3 - "$OUT/bench_paged.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("summary"):
        print("summary", {k: round(v, 3) if isinstance(v, float) else v for k, v in j.items()})
    elif "error" in j:
        print("ERROR", j)
    else:
        print(f"{j['kind']:8} b={j['b']:<3} L={j['L']:<6} sq={j['sq']:<3} h={j['h']}/{j['hk']} d={j['d']} "
              f"splits={j['splits']:<3} contig {j['contig_us']:8.1f} us  p16 {j['p16_us']:8.1f} "
              f"({j['vs16']:.3f})  p256 {j['p256_us']:8.1f} ({j['vs256']:.3f})")
PY
if command -v compute-sanitizer > /dev/null && [ -d ptx-out ]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --print-limit 20 \
    python3 scripts/gpu_check_paged.py ptx-out --subset > "$OUT/memcheck_paged.txt" 2>&1
  echo "memcheck_paged rc=$? ($(grep -c '^ok' "$OUT/memcheck_paged.txt") ok): $(grep 'ERROR SUMMARY' "$OUT/memcheck_paged.txt" | tail -1)"
fi
