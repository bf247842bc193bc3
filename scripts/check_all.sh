#!/usr/bin/env bash
# The whole GPU correctness matrix in one command, on a GPU machine, from a bundle built
# with `cargo xtask gpu-bundle` (run from the bundle's root or anywhere):
#
#   bash scripts/check_all.sh [OUT_DIR]        # default ./check-out
#
# Steps: the Rust GPU tests (run.sh: forward, backward both modes, mma probes, against the
# f64 CPU reference), the manifest-driven Python checks on the bundle's ptx-out/ (needs
# PyTorch and CuPy: forward, backward, KV cache, paged KV cache, varlen), and
# compute-sanitizer memcheck and racecheck on examples/sanitize, memcheck on the paged and
# varlen subsets
# (skipped when compute-sanitizer is not on PATH). One log per step in OUT_DIR, a
# summary.txt, and a non-zero exit status when any step fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$PWD/check-out}"
mkdir -p "$OUT"
: > "$OUT/summary.txt"
status=0
step() {
  local name=$1
  shift
  echo "=== $name: $*"
  if "$@" > "$OUT/$name.txt" 2>&1; then
    echo "$name: ok" | tee -a "$OUT/summary.txt"
  else
    echo "$name: FAILED (log: $OUT/$name.txt)" | tee -a "$OUT/summary.txt"
    status=1
  fi
  tail -n 3 "$OUT/$name.txt"
}
step rust_gpu_tests env OUT="$OUT/rust" ./run.sh
step check_fwd python3 scripts/gpu_check_fwd.py ptx-out
step check_bwd python3 scripts/gpu_check_bwd.py ptx-out
step check_kvcache python3 scripts/gpu_check_kvcache.py ptx-out
step check_paged python3 scripts/gpu_check_paged.py ptx-out
step check_varlen python3 scripts/gpu_check_varlen.py ptx-out
if command -v compute-sanitizer > /dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 examples/sanitize
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 examples/sanitize
  # the paged kernels with garbage tables under exact allocations
  step memcheck_paged env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
    --error-exitcode 1 python3 scripts/gpu_check_paged.py ptx-out --subset
  # the varlen kernels, good and garbage offsets, under exact allocations
  step memcheck_varlen env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
    --error-exitcode 1 python3 scripts/gpu_check_varlen.py ptx-out --subset
else
  echo "compute-sanitizer: not on PATH, memcheck and racecheck skipped" | tee -a "$OUT/summary.txt"
fi
echo "=== summary (logs in $OUT)"
cat "$OUT/summary.txt"
exit $status
