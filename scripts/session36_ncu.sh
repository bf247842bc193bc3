#!/usr/bin/env bash
# Session 36, second command (issue 19): where a windowed backward CTA's fixed cost goes (ncu source
# samples, 8K causal and window 1024), then the per-CTA fit at 32K.
set -u
cd "$(dirname "$0")/.."
OUT="$1"; mkdir -p "$OUT"
start=$(date +%s)
BENCH_N=8192 timeout 300 bash scripts/bwd_ncu_window.sh "$OUT/ncu8k"
left=$(( 560 - ($(date +%s) - start) ))
echo "#### 32K per-CTA fit (${left} s left)"
[ "$left" -gt 60 ] && BENCH_N=32768 ROWS="window256 window1024 window4096 causal" timeout "$left" bash scripts/bwd_cta_costs.sh "$OUT/cta32k"
