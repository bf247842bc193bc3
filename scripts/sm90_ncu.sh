#!/usr/bin/env bash
# Hardware counters of the forward kernels (issue 22), from the bundle of
# `bash scripts/bwd_bundle.sh` (run from target/gb on the GPU machine):
#
#   NCU_RUNS="pp=sm90pp sm80=sm80" BENCH_D=64 BENCH_SEQ=2048 BENCH_CAUSAL=1 \
#     BENCH_DTYPE=bf16 bash scripts/sm90_ncu.sh OUT_DIR
#
# One launch of each row's kernel per NCU_RUNS entry (label=BENCH_PATH, as sm90_all.sh),
# under `ncu --clock-control none` (the card's clocks stay as they are): speed of light,
# the pipes' utilisation (tensor, MUFU/XU, FMA, ALU), issue activity and warp stall
# reasons, into OUT_DIR/ncu_<label>.txt. Each run is bounded by `timeout`.
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_ncu.sh OUT_DIR}"
mkdir -p "$OUT"
METRICS=(
  gpu__time_duration.sum
  sm__throughput.avg.pct_of_peak_sustained_elapsed
  sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
  sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
  sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
  sm__pipe_fp16_cycles_active.avg.pct_of_peak_sustained_active
  smsp__issue_active.avg.pct_of_peak_sustained_active
  smsp__inst_executed.sum
  smsp__inst_executed_pipe_xu.sum
  smsp__inst_executed_pipe_fma.sum
  smsp__inst_executed_pipe_alu.sum
  dram__throughput.avg.pct_of_peak_sustained_elapsed
  lts__t_sector_hit_rate.pct
)
metrics=$(IFS=,; echo "${METRICS[*]}")
for run in ${NCU_RUNS:-pp=sm90pp}; do
  label=${run%%=*}; spec=${run#*=}
  IFS=: read -r path wgs <<< "$spec"
  BENCH_PATH=$path BENCH_SM90_WGS=${wgs:-} BENCH_ITERS=1 BENCH_OUT="$OUT/ncu_$label.json" \
    timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:'fa[23]_fwd' \
    --launch-skip 2 --launch-count 1 --metrics "$metrics" \
    --section WarpStateStats --section SchedulerStats examples/bench_fwd \
    > "$OUT/ncu_$label.txt" 2>&1
  echo "ncu $label rc=$? (${SECONDS}s)"
done
