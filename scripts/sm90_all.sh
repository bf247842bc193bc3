#!/usr/bin/env bash
# The Hopper path's device checks (issue 22) in one command, from the bundle of
# `bash scripts/bwd_bundle.sh` (run from target/gb: tests/, examples/ and scripts/ side by
# side; needs compute capability 9.0, PyTorch and Triton for the peers):
#
#   bash scripts/sm90_all.sh OUT_DIR
#
# 1. tests/gpu_probe_sm90 (TMA, mbarrier, wgmma, stmatrix against host references);
# 2. tests/gpu_fwd_sm90 (the first sm_90a forward against the float64 reference, the debug
#    build with bounded waits first);
# 3. only when both passed: memcheck and racecheck of the forward's test on its first
#    SM90_SANITIZE_SHAPES shapes (default 3; release build, both schedules), then three
#    interleaved rounds of examples/bench_fwd on the same rows with BENCH_PATH=sm90,
#    BENCH_PATH=sm90ovl (the overlapped schedule) and the sm80 path, each round followed by
#    scripts/bench_compare.py on the sm90 rows (SDPA flash and cuDNN); rows from env
#    (defaults here: BENCH_D=64,128 BENCH_SEQ=2048,4096,8192,16384 BENCH_CAUSAL=0,1
#    BENCH_DTYPE=bf16).
# Every step runs under `timeout` and is tarred into OUT_DIR/sm90.tgz after it; the whole
# script ends within SM90_DEADLINE seconds (default 560).
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_all.sh OUT_DIR}"
mkdir -p "$OUT"
DEADLINE="${SM90_DEADLINE:-560}"
export BENCH_D="${BENCH_D:-64,128}"
export BENCH_SEQ="${BENCH_SEQ:-2048,4096,8192,16384}"
export BENCH_CAUSAL="${BENCH_CAUSAL:-0,1}"
export BENCH_DTYPE="${BENCH_DTYPE:-bf16}"

left() {
  local l=$((DEADLINE - SECONDS))
  if [ "$l" -gt "$1" ]; then l=$1; fi
  echo "$l"
}
pack() { tar czf "$OUT/sm90.tgz" -C "$OUT" --exclude sm90.tgz . 2>/dev/null; }

nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "$(left 120)" tests/gpu_probe_sm90 --nocapture > "$OUT/probe.log" 2>&1
probe=$?
echo "gpu_probe_sm90 rc=$probe (${SECONDS}s)"
grep -E "err|NOTICE|test result|panicked|timed out|mbarrier" "$OUT/probe.log" | tail -8
pack
timeout "$(left 300)" tests/gpu_fwd_sm90 --nocapture > "$OUT/fwd.log" 2>&1
fwd=$?
echo "gpu_fwd_sm90 rc=$fwd (${SECONDS}s)"
grep -E "FAIL|NOTICE|test result|panicked|timed out|mbarrier|failures" "$OUT/fwd.log" | tail -12
pack
if [ "$probe" -ne 0 ] || [ "$fwd" -ne 0 ]; then
  echo "sm90_all: not benchmarking an sm_90a path that failed its checks"
  exit 1
fi
for tool in memcheck racecheck; do
  GPU_FWD_SM90_SHAPES="${SM90_SANITIZE_SHAPES:-3}" timeout "$(left 90)" \
    compute-sanitizer --tool "$tool" --print-limit 10 tests/gpu_fwd_sm90 --nocapture \
    > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$? (${SECONDS}s)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|test result" "$OUT/$tool.log" | tail -4
  pack
done
for i in 1 2 3; do
  t=$(left 60)
  if [ "$t" -lt 20 ]; then echo "round $i skipped (deadline)"; break; fi
  BENCH_PATH=sm90 BENCH_OUT="$OUT/sm90_r$i.json" timeout "$t" examples/bench_fwd > "$OUT/sm90_r$i.txt" 2>&1
  echo "sm90 round $i rc=$? (${SECONDS}s)"
  BENCH_PATH=sm90ovl BENCH_OUT="$OUT/sm90ovl_r$i.json" timeout "$(left 60)" examples/bench_fwd \
    > "$OUT/sm90ovl_r$i.txt" 2>&1
  echo "sm90ovl round $i rc=$? (${SECONDS}s)"
  BENCH_OUT="$OUT/sm80_r$i.json" timeout "$(left 60)" examples/bench_fwd > "$OUT/sm80_r$i.txt" 2>&1
  echo "sm80 round $i rc=$? (${SECONDS}s)"
  COMPARE_OUT="$OUT/cmp_r$i.json" timeout "$(left 90)" \
    python3 scripts/bench_compare.py "$OUT/sm90_r$i.json" > "$OUT/cmp_r$i.txt" 2>&1
  echo "peers round $i rc=$? (${SECONDS}s)"
  pack
done
tail -n 30 "$OUT"/cmp_r*.txt 2>/dev/null | tail -n 40
echo "sm90_all: results in $OUT (${SECONDS}s)"
