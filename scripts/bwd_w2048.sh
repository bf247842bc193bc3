#!/usr/bin/env bash
# The windowed backward on the standard tile row, the long one and the runtime's own
# choice (examples/bench_window, BENCH_PASS=bwd, bf16 d128 8K and 32K: causal and windows
# 256 / 1024 / 2048 / 4096), from target/gb after `BUNDLE_EXAMPLES=bench_window bash
# scripts/bwd_bundle.sh`:  bash scripts/bwd_w2048.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
for t in standard long auto; do
  tv=$t; [ $t = auto ] && tv=""
  BENCH_PASS=bwd BENCH_BWD_TILING=$tv BENCH_ROWS=causal,window256,window1024,window2048,window4096 \
    timeout 100 examples/bench_window > "$1/bwd_$t.jsonl" 2> "$1/bwd_$t.err"
  echo "bwd $t rc=$?"; tail -2 "$1/bwd_$t.err"
  python3 - "$1/bwd_$t.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("summary"):
        continue
    print(f"{r['n']:6d} {r['row']:12s} {r['kernel'][-28:]:28s} {r['ms']:8.3f} ms "
          f"unmasked {r['tflops_unmasked']:6.1f} visited {r['tflops_visited']:6.1f} "
          f"vs twin {r.get('unmasked_vs_twin', 0):.3f} / {r.get('visited_vs_twin', 0):.3f}")
PY
done
