#!/usr/bin/env bash
# What a backward CTA pays besides its query blocks (issue 19, the short windows): the
# main pass's duration under Nsight Compute for windows of 256 to 4096 keys and causal
# (bf16 d128 b2 h16, the standard 64 x 64 row, BENCH_N default 8192), fitted as
# T = t_block * (visited blocks) / slots + F * (CTAs) / slots, by least squares over the
# rows (scripts/bwd_cta_fit.py); then the occupancy ncu reports for the window-1024 and
# causal main passes (CTAs per SM, the shared-memory configuration the driver chose).
#
#   bash scripts/bwd_cta_costs.sh OUT_DIR    (from target/gb; EXE as bwd_pass_times.sh; ROWS;
#                                             FIT_MORE: other pass-time outputs to fit with)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: bwd_cta_costs.sh OUT_DIR}"
mkdir -p "$OUT"
N="${BENCH_N:-8192}"
ROWS="${ROWS:-window256 window1024 window2048 window4096 causal}"
BENCH_N=$N ROWS="$ROWS" bash scripts/bwd_pass_times.sh "$OUT/passes" | tee "$OUT/passes.txt"
python3 scripts/bwd_cta_fit.py "$N" "$OUT/passes.txt" ${FIT_MORE:-} | tee "$OUT/fit.txt"
export BENCH_PASS=bwd BENCH_N=$N BENCH_ROUNDS=1 BENCH_BWD_TILING=standard
for row in window1024 causal; do
  BENCH_ROWS=$row timeout 120 ncu --clock-control none -k "regex:fa2_bwd_d128_bf16_(causal|local)" \
    --launch-skip 2 --launch-count 1 --section Occupancy --section LaunchStats \
    --metrics sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__ctas_launched.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
    --csv --page details "${EXE:-examples/bench_window}" > "$OUT/occ_$row.csv" 2> "$OUT/occ_$row.err"
  echo "== occupancy $row rc=$?"
  grep -E "Block Limit|Occupancy|Shared Memory Config|Waves Per SM|sm__|Registers Per|Dynamic Shared" "$OUT/occ_$row.csv" \
    | awk -F'","' '{print "  "$(NF-2)" = "$NF}' | sed 's/"$//'
done
