#!/usr/bin/env bash
# Session 36's device command (issue 19): the elementwise-pass A/B (bwd_elementwise_ab.sh),
# then, while time is left, the main pass's per-CTA cost fit (bwd_cta_costs.sh: windows
# 256, 2048, 4096 beside the A/B's 1024 and causal) and its occupancy.
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: session36_run.sh OUT_DIR}"
mkdir -p "$OUT"
start=$(date +%s)
bash scripts/bwd_elementwise_ab.sh "$OUT/ew" | tee "$OUT/ew.txt"
left=$(( 540 - ($(date +%s) - start) ))
echo "#### per-CTA costs (${left} s left)"
if [ "$left" -gt 60 ]; then
  FIT_MORE="$OUT/ew.txt" ROWS="window256 window2048 window4096" timeout "$left" bash scripts/bwd_cta_costs.sh "$OUT/cta"
fi
