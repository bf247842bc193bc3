#!/usr/bin/env bash
# ncu on the sm_90a forward (one launch each, bf16 d128 8K causal): the plain kernel and
# the softcap's (cap 30). Pipe utilisations (which unit saturates), warp stall reasons
# and the instruction mix, as CSV, for the softcap's cost (docs/hopper.md, Next 3).
#
#   bash scripts/sm90_pipes.sh OUT_DIR [BIN]      (from target/gb; BIN: bench_fwd)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_pipes.sh OUT_DIR [BIN]}"
BIN="${2:-bench_fwd}"
mkdir -p "$OUT"
for cfg in plain:0 softcap:30; do
  label=${cfg%%:*}; cap=${cfg#*:}
  env BENCH_PATH=sm90tst BENCH_CAUSAL=1 BENCH_D=128 BENCH_SEQ=8192 BENCH_DTYPE=bf16 \
    $([ "$cap" != 0 ] && echo BENCH_SOFTCAP=$cap) \
    timeout 150 ncu --kernel-name regex:fa3_fwd --launch-skip 3 --launch-count 1 \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
    --metrics "regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
    --csv --page details "examples/$BIN" > "$OUT/$label.csv" 2> "$OUT/$label.err"
  echo "$label rc=$? ($(wc -l < "$OUT/$label.csv") lines)"
  grep -E "pipe|Stall|Issue|IPC|Executed Ipc" "$OUT/$label.csv" | awk -F'","' '{print $(NF-2)" = "$NF}' \
    | sed 's/"$//' | sort -u | head -80
done
