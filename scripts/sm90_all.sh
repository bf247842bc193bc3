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
#    tests/gpu_fwd_sm90_scores where bundled (softcap and ALiBi, not yet routed);
# 3. tests/gpu_fwd_select (forward_into's choice of the sm_90a kernel, ForwardArch),
#    tests/gpu_embed_sm90 (flash_kernel!'s embedded sm_90a kernels),
#    scripts/manifest_sm90.py and manifest_sm90_scores.py on target/gb/ptx-sm90a (launches
#    from the manifest alone; the softcap and ALiBi kernels in the second)
#    and tests/gpu_fwd (the dense forward suite on forward_into's own choice);
# 4. only when the probe passed: memcheck and racecheck of the forward's test on its first
#    SM90_SANITIZE_SHAPES shapes (default 3; or i,j,..: those, 0-based; memcheck's:
#    SM90_MEMCHECK_SHAPES where set; release build, every schedule), then three interleaved
#    rounds of examples/bench_fwd on the same rows, one run per SM90_RUNS
#    entry (default: the overlapped and pingpong schedules at the default tiles, both
#    with two consumers at d64, and the sm80 path), each round followed by
#    scripts/bench_compare.py (SDPA flash and cuDNN; FlexAttention with BENCH_FLEX=1);
#    then scripts/sm90_bars.py: medians of the rounds and the issue's ratios. Rows from
#    env (defaults here: BENCH_D=64,128 BENCH_SEQ=2048,4096,8192,16384 BENCH_CAUSAL=0,1
#    BENCH_DTYPE=bf16,f16).
# Every step runs under `timeout` and is tarred into OUT_DIR/sm90.tgz after it; the whole
# script ends within SM90_DEADLINE seconds (default 560). SM90_BENCH_ONLY=1: step 4's bench
# alone (a separate device command after the checks).
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_all.sh OUT_DIR}"
mkdir -p "$OUT"
DEADLINE="${SM90_DEADLINE:-560}"
export BENCH_D="${BENCH_D:-64,128}"
export BENCH_SEQ="${BENCH_SEQ:-2048,4096,8192,16384}"
export BENCH_CAUSAL="${BENCH_CAUSAL:-0,1}"
export BENCH_DTYPE="${BENCH_DTYPE:-bf16,f16}"

left() {
  local l=$((DEADLINE - SECONDS))
  if [ "$l" -gt "$1" ]; then l=$1; fi
  echo "$l"
}
pack() { tar czf "$OUT/sm90.tgz" -C "$OUT" --exclude sm90.tgz . 2>/dev/null; }

nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -n "${SM90_BENCH_ONLY:-}" ]; then
  echo "sm90_all: SM90_BENCH_ONLY: the bench alone (checks skipped)"
else
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
  if [ -x tests/gpu_fwd_sm90_scores ]; then
    timeout "$(left 200)" tests/gpu_fwd_sm90_scores --nocapture > "$OUT/scores.log" 2>&1
    echo "gpu_fwd_sm90_scores rc=$? (${SECONDS}s)"
    grep -E "FAIL|test result|panicked|timed out|mbarrier|failures" "$OUT/scores.log" | tail -8
    pack
  fi
  timeout "$(left 120)" tests/gpu_fwd_select --nocapture > "$OUT/select.log" 2>&1
  echo "gpu_fwd_select rc=$? (${SECONDS}s)"
  grep -E "FAIL|NOTICE|test result|panicked|failures" "$OUT/select.log" | tail -8
  if [ -x tests/gpu_embed_sm90 ]; then
    timeout "$(left 60)" tests/gpu_embed_sm90 --nocapture > "$OUT/embed.log" 2>&1
    echo "gpu_embed_sm90 rc=$? (${SECONDS}s)"
    grep -E "FAIL|NOTICE|test result|panicked" "$OUT/embed.log" | tail -4
  fi
  if [ -d ptx-sm90a ]; then
    timeout "$(left 120)" python3 scripts/manifest_sm90.py ptx-sm90a > "$OUT/manifest.log" 2>&1
    echo "manifest_sm90.py rc=$? (${SECONDS}s)"
    tail -n 4 "$OUT/manifest.log"
    timeout "$(left 90)" python3 scripts/manifest_sm90_scores.py ptx-sm90a \
      > "$OUT/manifest_scores.log" 2>&1
    echo "manifest_sm90_scores.py rc=$? (${SECONDS}s)"
    grep -E "FAIL|ALL OK|SOME|Error|error" "$OUT/manifest_scores.log" | tail -n 6
  fi
  if [ -x tests/gpu_fwd ]; then
    # the dense forward suite, forward_into's own choice (sm_90a at d64/d128 here)
    timeout "$(left 100)" tests/gpu_fwd > "$OUT/gpu_fwd.log" 2>&1
    echo "gpu_fwd (auto) rc=$? (${SECONDS}s)"
    grep -E "test result|panicked|FAILED|failures:" "$OUT/gpu_fwd.log" | tail -6
  fi
  pack
  if [ "$probe" -ne 0 ]; then
    echo "sm90_all: not benchmarking an sm_90a path whose probe failed"
    exit 1
  fi
  [ "$fwd" -ne 0 ] && echo "sm90_all: WARNING gpu_fwd_sm90 failed: benchmarking anyway, see fwd.log"
  for tool in memcheck racecheck; do
    shapes="${SM90_SANITIZE_SHAPES:-3}"
    [ "$tool" = memcheck ] && shapes="${SM90_MEMCHECK_SHAPES:-$shapes}"
    GPU_FWD_SM90_SHAPES="$shapes" timeout "$(left 90)" \
      compute-sanitizer --tool "$tool" --print-limit 10 tests/gpu_fwd_sm90 --nocapture \
      > "$OUT/$tool.log" 2>&1
    echo "$tool rc=$? (${SECONDS}s)"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|test result" "$OUT/$tool.log" | tail -4
    pack
  done
fi
# SM90_RUNS: label=BENCH_PATH[:consumer warpgroups[:head dims[:binary]]] per timed path
# (binary: examples/bench_fwd, or another build beside it such as bench_fwd_base; BENCH_PATH:
# sm80, auto, sm90, sm90ovl, sm90pp, sm90pers, sm90dyn, sm90chain, sm90tst (the shipping
# kernels), sm90qa: examples/bench_fwd.rs); the first
# label's JSON carries the rows the peers are timed on; SM90_RUNS="" (set, empty): the
# checks alone
RUNS="${SM90_RUNS-ship=sm90tst sm80=sm80}"
if [ -z "$RUNS" ]; then
  echo "sm90_all: SM90_RUNS is empty: no bench (${SECONDS}s)"
  exit 0
fi
for i in 1 2 3; do
  t=$(left 60)
  if [ "$t" -lt 20 ]; then echo "round $i skipped (deadline)"; break; fi
  first=""
  for run in $RUNS; do
    label=${run%%=*}; spec=${run#*=}
    IFS=: read -r path wgs dims bin <<< "$spec"
    [ -z "$first" ] && first=$label
    BENCH_PATH=$path BENCH_SM90_WGS=${wgs:-} BENCH_D=${dims:-$BENCH_D} \
      BENCH_OUT="$OUT/${label}_r$i.json" timeout "$(left 60)" "examples/${bin:-bench_fwd}" \
      > "$OUT/${label}_r$i.txt" 2>&1
    echo "$label round $i rc=$? (${SECONDS}s)"
  done
  COMPARE_OUT="$OUT/cmp_r$i.json" timeout "$(left 150)" \
    python3 scripts/bench_compare.py "$OUT/${first}_r$i.json" > "$OUT/cmp_r$i.txt" 2>&1
  echo "peers round $i rc=$? (${SECONDS}s)"
  pack
done
python3 scripts/sm90_bars.py "$OUT" $(for run in $RUNS; do printf '%s ' "${run%%=*}"; done) \
  | tee "$OUT/bars.txt"
pack
echo "sm90_all: results in $OUT (${SECONDS}s)"
