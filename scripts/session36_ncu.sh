#!/usr/bin/env bash
# Session 36's second device command (issue 19; did not run: no device time was left):
# where a windowed backward CTA's fixed cost goes (scripts/bwd_ncu_window.sh: ncu source
# samples of the 8K causal and window-1024 main passes), then the per-CTA fit at 32K
# (scripts/bwd_cta_costs.sh).   bash scripts/session36_ncu.sh OUT_DIR   (from target/gb)
set -u
cd "$(dirname "$0")/.."
OUT="$1"; mkdir -p "$OUT"
start=$(date +%s)
BENCH_N=8192 timeout 300 bash scripts/bwd_ncu_window.sh "$OUT/ncu8k"
left=$(( 560 - ($(date +%s) - start) ))
echo "#### 32K per-CTA fit (${left} s left)"
[ "$left" -gt 60 ] && BENCH_N=32768 ROWS="window256 window1024 window4096 causal" timeout "$left" bash scripts/bwd_cta_costs.sh "$OUT/cta32k"
