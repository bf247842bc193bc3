#!/usr/bin/env bash
# The sm_90a sliding window's per-tile cost (issue 19's short-window bar): d128 bf16 rows,
# three interleaved rounds of the causal kernel and windows 256, 1024, 4096
# (bench_fwd's BENCH_WINDOW) on the paths of PATHS (sm90tst: the shipping kernels, with
# the TMA epilogue; sm90dyn: the same schedule with the pair stores; sm90chain: the tile
# edges chained; sm90qa: next Q early); each window's TFLOP/s on its unmasked pairs over
# the causal kernel's of the first path (`causal`; scripts/sm90_fwd_variants.sh), the
# others' causal kernels beside it (`causal_<path>`).
#
#   bash scripts/sm90_window_edges.sh OUT_DIR   (env BENCH_SEQ, default 8192,16384;
#                                                WINDOWS, default 256 1024 4096;
#                                                PATHS, default sm90tst)
set -u
cd "$(dirname "$0")/.."
export BENCH_D=128 BENCH_DTYPE=bf16 BENCH_SEQ="${BENCH_SEQ:-8192,16384}"
PATHS="${PATHS:-sm90tst}"
first=${PATHS%% *}
cfgs="causal:BENCH_CAUSAL=1,BENCH_PATH=$first"
for path in ${PATHS#$first}; do cfgs="$cfgs causal_$path:BENCH_CAUSAL=1,BENCH_PATH=$path"; done
for w in ${WINDOWS:-256 1024 4096}; do
  for path in $PATHS; do
    cfgs="$cfgs w${w}_$path:BENCH_CAUSAL=0,BENCH_WINDOW=$w,BENCH_PATH=$path"
  done
done
bash scripts/sm90_fwd_variants.sh "${1:?usage: sm90_window_edges.sh OUT_DIR}" causal "$cfgs"
