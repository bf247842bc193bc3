#!/usr/bin/env bash
# The grouped-query backward next to PyTorch SDPA's FlashAttention-2 and cuDNN backends, in
# one command on a GPU machine, from a bundle built with `cargo xtask gpu-bundle` (run from
# the bundle's root: examples/ and scripts/ side by side; needs the driver, PyTorch, Triton).
#
#   bash scripts/gqa_bwd_all.sh OUT_DIR
#
# Three interleaved rounds; in each: ours (examples/bench_bwd on the GQA rows, BENCH_OUT
# OUT_DIR/ours_rN.json, log ours_rN.txt), then the peers on the same rows
# (scripts/bench_compare_bwd.py, OUT_DIR/cmp_rN.json, log cmp_rN.txt); then the summary
# (scripts/bench_gqa_bwd.py: medians over the rounds, median of the per-round ratios, geomean
# over the rows, one table per split setting; OUT_DIR/summary.txt and gqa_summary.json).
#
# Rows (env, passed through to bench_bwd; defaults here): BENCH_D=64,128
# BENCH_SEQ=2048,4096,8192,16384 BENCH_CAUSAL=1 BENCH_DTYPE=bf16
# BENCH_HEADS=32/32,32/16,32/8,28/4,32/4,32/2 (h/hk) BENCH_SPLITS=0 (0 = automatic; e.g.
# 0,1,2,4,7 for a sweep) and BENCH_TOKENS (16384: batch = tokens / seqlen); BENCH_ITERS
# (bench_bwd: 20 timed calls), BENCH_DET=1 (deterministic mode), COMPARE_REP /
# COMPARE_WARMUP (the peers' do_bench rep / warmup, ms: 100 / 25) pass through as well.
# Default set: 2 x 4 x 6 = 48 rows; about 1-1.5 minutes a round on an H200 (estimate).
#
# Time limits: every command under `timeout` (GQA_TIMEOUT_OURS, default 120 s;
# GQA_TIMEOUT_PEERS, 150 s), all of them cut to what is left of GQA_DEADLINE (default 540 s
# from the start; a round that would start with less than 20 s left is skipped), then the
# summary (30 s): the whole script ends within about 570 s.
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: gqa_bwd_all.sh OUT_DIR}"
mkdir -p "$OUT"
export BENCH_D="${BENCH_D:-64,128}"
export BENCH_SEQ="${BENCH_SEQ:-2048,4096,8192,16384}"
export BENCH_CAUSAL="${BENCH_CAUSAL:-1}"
export BENCH_DTYPE="${BENCH_DTYPE:-bf16}"
export BENCH_HEADS="${BENCH_HEADS:-32/32,32/16,32/8,28/4,32/4,32/2}"
export BENCH_SPLITS="${BENCH_SPLITS:-0}"
T_OURS="${GQA_TIMEOUT_OURS:-120}"
T_PEERS="${GQA_TIMEOUT_PEERS:-150}"
DEADLINE="${GQA_DEADLINE:-540}"

# seconds a step may take: its own limit, cut to what is left before the deadline
left() {
  local l=$((DEADLINE - SECONDS))
  if [ "$l" -gt "$1" ]; then l=$1; fi
  echo "$l"
}

echo "gqa_bwd_all: D=$BENCH_D SEQ=$BENCH_SEQ CAUSAL=$BENCH_CAUSAL DTYPE=$BENCH_DTYPE" \
  "HEADS=$BENCH_HEADS SPLITS=$BENCH_SPLITS ITERS=${BENCH_ITERS:-20} DET=${BENCH_DET:-0}"
for i in 1 2 3; do
  rm -f "$OUT/ours_r$i.json" "$OUT/cmp_r$i.json"
  t=$(left "$T_OURS")
  if [ "$t" -lt 20 ]; then
    echo "round $i skipped: ${t}s left before the deadline (GQA_DEADLINE=$DEADLINE)"
    break
  fi
  BENCH_OUT="$OUT/ours_r$i.json" timeout "$t" examples/bench_bwd > "$OUT/ours_r$i.txt" 2>&1
  echo "ours run $i rc=$? (${SECONDS}s)"
  if [ ! -s "$OUT/ours_r$i.json" ]; then
    tail -3 "$OUT/ours_r$i.txt"
    continue
  fi
  t=$(left "$T_PEERS")
  if [ "$t" -lt 5 ]; then
    echo "peers run $i skipped: ${t}s left before the deadline"
    break
  fi
  COMPARE_OUT="$OUT/cmp_r$i.json" timeout "$t" \
    python3 scripts/bench_compare_bwd.py "$OUT/ours_r$i.json" > "$OUT/cmp_r$i.txt" 2>&1
  echo "peers run $i rc=$? (${SECONDS}s)"
done
timeout 30 python3 scripts/bench_gqa_bwd.py "$OUT" "$OUT/gqa_summary.json" 2>&1 | tee "$OUT/summary.txt"
echo "gqa_bwd_all: results in $OUT (${SECONDS}s)"
