#!/usr/bin/env bash
# GPU checks of the backward with dQ written by its main pass (issue 19, session 35):
# the dense backward tests (atomic mode twice on one scratch), the windowed and varlen
# ones, ALiBi, then compute-sanitizer memcheck on the d64 and d128 dense cases.
#
#   bash scripts/fold_check.sh OUT_DIR    (from target/gb)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: fold_check.sh OUT_DIR}"
mkdir -p "$OUT"
for t in ${TESTS:-gpu_bwd gpu_window_bwd gpu_varlen gpu_alibi}; do
  start=$(date +%s)
  timeout 300 "tests/$t" > "$OUT/$t.log" 2>&1
  echo "== $t rc=$? $(( $(date +%s) - start )) s: $(grep -E '^test result' "$OUT/$t.log")"
  grep -E "FAILED|panicked" "$OUT/$t.log" | head -5
done
if [ -n "${MEMCHECK:-1}" ]; then
  start=$(date +%s)
  GPU_BWD_D="${MEMCHECK_D:-64,128}" timeout 300 compute-sanitizer --tool memcheck --print-limit 20 \
    tests/gpu_bwd backward_matches_f64_reference > "$OUT/memcheck.log" 2>&1
  echo "== memcheck gpu_bwd rc=$? $(( $(date +%s) - start )) s: $(grep -E 'ERROR SUMMARY|^test result' "$OUT/memcheck.log" | tr '\n' ' ')"
fi
