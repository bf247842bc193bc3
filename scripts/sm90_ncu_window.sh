#!/usr/bin/env bash
# Where the sm_90a sliding window's time goes (issue 19's short windows): Nsight Compute on
# one launch of the shipping causal kernel and of each window (d128 bf16, b 2, h 16,
# BENCH_SEQ default 8192), with warp-state sampling per SASS instruction. Writes, per
# label, the details page and the per-instruction samples as CSV
# (`OUT/<label>_details.csv`, `OUT/<label>_sass.csv`) and prints each kernel's duration,
# pipe activity and stall summary; scripts/ncu_stalls.py reads the CSVs.
#
#   bash scripts/sm90_ncu_window.sh OUT_DIR   (env WINDOWS, default 1024; NCU_PATH, the
#                                             bench_fwd path, default sm90tst; NCU_CFGS)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_ncu_window.sh OUT_DIR}"
mkdir -p "$OUT"
export BENCH_D=128 BENCH_DTYPE=bf16 BENCH_SEQ="${BENCH_SEQ:-8192}" BENCH_ITERS=1 BENCH_PATH="${NCU_PATH:-sm90tst}"
cfgs="causal:BENCH_CAUSAL=1"
for w in ${WINDOWS:-1024}; do cfgs="$cfgs w$w:BENCH_CAUSAL=0,BENCH_WINDOW=$w"; done
# NCU_CFGS="label:VAR=v,.. ..": other configurations instead (e.g. a softcap:
# "cap30:BENCH_CAUSAL=1,BENCH_SOFTCAP=30")
cfgs="${NCU_CFGS:-$cfgs}"
for cfg in $cfgs; do
  label=${cfg%%:*}; vars=${cfg#*:}
  env $(echo "$vars" | tr ',' ' ') timeout 150 ncu --clock-control none -k regex:fa3_fwd \
    --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section SourceCounters --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section LaunchStats -f -o "$OUT/$label" \
    examples/bench_fwd > "$OUT/${label}_ncu.log" 2>&1 || echo "$label: ncu failed"
  ncu -i "$OUT/$label.ncu-rep" --page details --csv > "$OUT/${label}_details.csv" 2>&1
  ncu -i "$OUT/$label.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/${label}_sass.csv" 2>&1
  rm -f "$OUT/$label.ncu-rep"
  echo "== $label"
  python3 scripts/ncu_stalls.py "$OUT/${label}_details.csv" "$OUT/${label}_sass.csv" || tail -5 "$OUT/${label}_ncu.log"
done
