#!/usr/bin/env bash
# The windowed backward on the standard tile row, the long one and the runtime's own
# choice (examples/bench_window, BENCH_PASS=bwd, bf16 d128 8K and 32K: causal and windows
# 256 / 1024 / 2048 / 4096), from target/gb after `BUNDLE_EXAMPLES=bench_window bash
# scripts/bwd_bundle.sh`:  bash scripts/bwd_w2048.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
for t in standard long auto; do
  tv=$t; [ $t = auto ] && tv=""
  BENCH_PASS=bwd BENCH_BWD_TILING=$tv BENCH_ROWS=causal,window256,window1024,window2048,window4096 \
    timeout 100 examples/bench_window > "$1/bwd_$t.jsonl" 2> "$1/bwd_$t.err"
  echo "bwd $t rc=$?"; tail -2 "$1/bwd_$t.err"
  python3 scripts/bench_window_rows.py "$1/bwd_$t.jsonl"
done
