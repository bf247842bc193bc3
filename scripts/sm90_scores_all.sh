#!/usr/bin/env bash
# The sm_90a softcap and ALiBi forward's device checks and bench (issues 19 and 22) in one
# command, from the bundle of `BUNDLE_TESTS="gpu_fwd_sm90_scores gpu_fwd_select
# gpu_embed_sm90 gpu_window gpu_alibi" bash scripts/bwd_bundle.sh` (run from target/gb):
#
#   bash scripts/sm90_scores_all.sh OUT_DIR
#
# 1. tests/gpu_fwd_sm90_scores (the kernels against float64 beside the sm_80 forward);
#    forward_into's route: tests/gpu_fwd_select, tests/gpu_embed_sm90;
#    scripts/manifest_sm90.py and manifest_sm90_scores.py on ptx-sm90a (the manifest alone);
# 2. scripts/bench_flex_sm90.py: the softcap and ALiBi rows beside their plain twins and
#    FlexAttention (env BENCH_N, default 8192; BENCH_ROWS);
# 3. scripts/sm90_window_edges.sh (unless SKIP_EDGES is set);
# 4. as time allows, forward_into with the modifiers (Auto: sm_90a at d64/d128):
#    tests/gpu_window's softcap forward and tests/gpu_alibi's forward and backward (the
#    backward takes the sm_90a forward's lse).
# Every step under `timeout`; the whole within SCORES_DEADLINE seconds (default 570).
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_scores_all.sh OUT_DIR}"
mkdir -p "$OUT"
DEADLINE="${SCORES_DEADLINE:-570}"
left() {
  local l=$((DEADLINE - SECONDS))
  if [ "$l" -gt "$1" ]; then l=$1; fi
  echo "$l"
}
step() { # name seconds command...: runs, logs to OUT/name.log, prints rc and the summary
  local name=$1 t=$2; shift 2
  timeout "$(left "$t")" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? (${SECONDS}s)"
  grep -E "FAIL|test result|panicked|timed out|mbarrier|failures:|ALL OK|SOME|NOTICE" \
    "$OUT/$name.log" | tail -n 8
}
nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
step scores 200 tests/gpu_fwd_sm90_scores --nocapture
step select 90 tests/gpu_fwd_select --nocapture
step embed 60 tests/gpu_embed_sm90 --nocapture
step manifest 90 python3 scripts/manifest_sm90.py ptx-sm90a
step manifest_scores 90 python3 scripts/manifest_sm90_scores.py ptx-sm90a
BENCH_N="${BENCH_N:-8192}" \
  BENCH_ROWS="${BENCH_ROWS:-causal,plain,causal_softcap30,plain_softcap30,causal_alibi,plain_alibi}" \
  timeout "$(left 240)" python3 scripts/bench_flex_sm90.py ptx-sm90a > "$OUT/bench.jsonl" 2> "$OUT/bench.err"
echo "bench_flex_sm90 rc=$? (${SECONDS}s)"
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "ours_ms" in r:
        twin = f" twin {r['twin']} {r['twin_ms_over_ms']:.3f}" if "twin" in r else ""
        print(f"{r['n']:6} {r['row']:17} ours {r['ours_tflops']:6.1f} flex {r['flex_tflops']:6.1f} "
              f"TFLOP/s ours/flex {r['ours_over_flex']:.3f}{twin}")
    elif "rel_l2" in r:
        print(f"{r['n']:6} {r['row']:17} {r['kernel']} rel-L2 ours {r['rel_l2']['ours']:.2e} flex {r['rel_l2']['flex']:.2e}")
PY
tail -n 3 "$OUT/bench.err"
[ -n "${SKIP_EDGES:-}" ] || timeout "$(left 150)" bash scripts/sm90_window_edges.sh "$OUT/edges" 2>&1 | tail -n 14
# forward_into's route with the modifiers (Auto: sm_90a at d64/d128), as time allows
step window 120 tests/gpu_window softcapped_forward --nocapture
step alibi 150 tests/gpu_alibi alibi_forward_and_backward --nocapture
