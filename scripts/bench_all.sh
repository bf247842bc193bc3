#!/usr/bin/env bash
# The whole benchmark in one command, on a GPU machine, from a bundle built with
# `cargo xtask gpu-bundle` (run from the bundle's root: examples/ and scripts/ next to it):
#
#   bash scripts/bench_all.sh [OUT_DIR]        # default ./bench-out
#
# Forward and backward sweeps of the FA2 paper's setup (hidden 2048, 16K tokens, d 64/128/256,
# causal and not, seqlen 512..16K, bf16 and f16), each next to PyTorch SDPA's flash (FA2)
# and cuDNN backends in the same run; the memory of forward + backward; and, when
# matplotlib is installed, the PNG plots. Writes fwd.json, bwd.json, memory.json,
# bench_compare*.json and *.txt tables into OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$PWD/bench-out}"
mkdir -p "$OUT"
BENCH_OUT="$OUT/fwd.json" examples/bench_fwd | tee "$OUT/fwd_ours.txt"
COMPARE_OUT="$OUT/bench_compare.json" python3 scripts/bench_compare.py "$OUT/fwd.json" | tee "$OUT/fwd_compare.txt"
BENCH_OUT="$OUT/bwd.json" examples/bench_bwd | tee "$OUT/bwd_ours.txt"
COMPARE_OUT="$OUT/bench_compare_bwd.json" python3 scripts/bench_compare_bwd.py "$OUT/bwd.json" | tee "$OUT/bwd_compare.txt"
BENCH_MEM=1 BENCH_OUT="$OUT/memory.json" examples/bench_bwd | tee "$OUT/memory_ours.txt"
COMPARE_OUT="$OUT/memory_compare.json" python3 scripts/bench_compare_bwd.py "$OUT/memory.json" | tee "$OUT/memory_compare.txt"
if python3 -c "import matplotlib" 2>/dev/null; then
  for dt in bf16 f16; do
    python3 scripts/plot_bench.py --fwd "$OUT/bench_compare.json" --bwd "$OUT/bench_compare_bwd.json" \
      --out-dir "$OUT" --dtype "$dt"
  done
fi
echo "bench_all: results in $OUT"
