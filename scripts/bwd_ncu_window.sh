#!/usr/bin/env bash
# Where the windowed backward's time goes (issue 19, bwd window 1024): Nsight Compute on
# one launch of the main backward pass (atomic mode) for the causal row and each window,
# all on one tile row (BENCH_BWD_TILING, default standard; bf16 d128 b2 h16, BENCH_N
# default 8192), with warp-state sampling per SASS instruction; per label the details and
# per-instruction samples as CSV, summarised by scripts/ncu_stalls.py, and the SM-active
# cycles beside the elapsed ones (idle SMs: the grid's tail and CTA turnover).
#
#   bash scripts/bwd_ncu_window.sh OUT_DIR    (from target/gb after
#   `BUNDLE_EXAMPLES=bench_window bash scripts/bwd_bundle.sh`; env WINDOWS, default 1024)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: bwd_ncu_window.sh OUT_DIR}"
mkdir -p "$OUT"
export BENCH_PASS=bwd BENCH_N="${BENCH_N:-8192}" BENCH_ROUNDS=1
export BENCH_BWD_TILING="${BENCH_BWD_TILING:-standard}"
rows="causal"
for w in ${WINDOWS:-1024}; do rows="$rows window$w"; done
for row in $rows; do
  BENCH_ROWS=$row timeout 200 ncu --clock-control none -k "regex:fa2_bwd_d128_bf16_(causal|local)" \
    --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section SourceCounters --section ComputeWorkloadAnalysis --section LaunchStats \
    --section Occupancy --metrics sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__cycles_active.min,sm__warps_active.avg.pct_of_peak_sustained_active \
    -f -o "$OUT/$row" examples/bench_window > "$OUT/${row}_ncu.log" 2>&1 || echo "$row: ncu failed"
  ncu -i "$OUT/$row.ncu-rep" --page details --csv > "$OUT/${row}_details.csv" 2>&1
  ncu -i "$OUT/$row.ncu-rep" --page source --csv --print-source sass > "$OUT/${row}_sass.csv" 2>&1
  rm -f "$OUT/$row.ncu-rep"
  echo "== $row"
  grep -E "sm__cycles|sm__warps_active|Waves Per SM|Achieved Occupancy|Block Limit|Theoretical Occ" "$OUT/${row}_details.csv" \
    | awk -F'","' '{print "  "$(NF-2)" = "$NF}' | sed 's/"$//'
  python3 scripts/ncu_stalls.py "$OUT/${row}_details.csv" "$OUT/${row}_sass.csv" 12 || tail -5 "$OUT/${row}_ncu.log"
done
