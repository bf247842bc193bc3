#!/usr/bin/env bash
# The per-tile (forward) and per-key-block (backward) fixed cost without any mask: both
# passes unmasked at 1K, 2K and 8K keys (bf16 d128, batch = 16384 / n, 16 heads): at 1K a
# forward tile visits 8 key blocks and a backward key block 16 query blocks, as many as
# a 1024-key window's unmasked middle, with no edge block. Unmasked TFLOP/s at 1K over
# 8K's is the share the fixed cost leaves; the window's ratio below it is its edges'.
# (bench_bwd spins the GPU past the host's enqueue since session 34's run, which had no
# spin: its short rows then may hold host time.)
#
#   bash scripts/edge_costs.sh OUT_DIR      (from target/gb)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: edge_costs.sh OUT_DIR}"
mkdir -p "$OUT"
export BENCH_D=128 BENCH_DTYPE=bf16 BENCH_CAUSAL=0 BENCH_SEQ=1024,2048,8192
for r in 1 2 3; do
  BENCH_PATH=sm90tst BENCH_OUT="$OUT/fwd_$r.json" timeout 60 examples/bench_fwd > "$OUT/fwd_$r.log" 2>&1
  echo "fwd round $r rc=$?"
  BENCH_TILING=standard BENCH_OUT="$OUT/bwd_$r.json" timeout 90 examples/bench_bwd > "$OUT/bwd_$r.log" 2>&1
  echo "bwd round $r rc=$?"
done
python3 - "$OUT" <<'PY'
import json, sys, glob, statistics
out = sys.argv[1]
for p in ("fwd", "bwd"):
    rows = {}
    for f in sorted(glob.glob(f"{out}/{p}_*.json")):
        data = json.load(open(f))
        for r in data["rows"]:
            key, tf = r["n"], r[f"{p}_tflops"]
            if key is not None and tf is not None:
                rows.setdefault(key, []).append(tf)
    base = statistics.median(rows[max(rows)]) if rows else None
    for k in sorted(rows):
        m = statistics.median(rows[k])
        print(f"{p} n {k:6} TFLOP/s median {m:7.1f} ({', '.join(f'{x:.1f}' for x in rows[k])})  / n {max(rows)}: {m / base:.3f}")
PY
