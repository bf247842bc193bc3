# Sourced by the device commands (scripts/sm90_fx_tst.sh, scripts/sm90_qa.sh) from
# target/gb: the GPU's name and clock, then `step NAME` (a heading with the seconds so far)
# and `summary LOG` (a test log's verdict lines), `fwd_sm90_shipping LIMIT FIELD` and
# `fwd_sm90_scores LIMIT` (below).
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
step() { echo "== $1 (${SECONDS}s)"; }
summary() { grep -E "test result|FAIL|panicked|geometric|failures|ERROR SUMMARY" "$1" | head -8; }
# tests/gpu_fwd_sm90 on the shipping schedule (all its epilogue and producer options) under
# a limit of LIMIT seconds, then memcheck on three of its cases; prints how many cases set
# FIELD (a `Sm90FwdShape` field, e.g. tma_store).
fwd_sm90_shipping() {
  local limit="$1" field="$2"
  GPU_FWD_SM90_SCHEDULES=4 timeout "$limit" tests/gpu_fwd_sm90 --nocapture > "$OUT/fwd.log" 2>&1
  echo "rc=$?"; summary "$OUT/fwd.log"
  echo "$field cases: $(grep -c "$field: true" "$OUT/fwd.log")"
  GPU_FWD_SM90_SCHEDULES=4 GPU_FWD_SM90_SHAPES=0,8,13,19 timeout 60 compute-sanitizer \
    --tool memcheck --print-limit 10 tests/gpu_fwd_sm90 --nocapture > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; summary "$OUT/memcheck.log"
}
# tests/gpu_fwd_sm90_scores (softcap and ALiBi on the sm_90a forward) under a limit of
# LIMIT seconds, its log in $OUT/scores.log.
fwd_sm90_scores() {
  timeout "$1" tests/gpu_fwd_sm90_scores --nocapture > "$OUT/scores.log" 2>&1
  echo "scores rc=$?"; summary "$OUT/scores.log"
}
