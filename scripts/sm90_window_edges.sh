#!/usr/bin/env bash
# The sm_90a sliding window's per-tile cost (issue 19's short-window bar): examples/
# bench_fwd (from target/gb) on d128 bf16 rows, three interleaved rounds of the causal
# kernel and windows 256, 1024, 4096 (BENCH_WINDOW) on the shipping schedule (sm90dyn)
# and with the tile edges chained (sm90chain); then the medians: each window's TFLOP/s on
# its unmasked pairs over the causal kernel's, and chain over dyn.
#
#   bash scripts/sm90_window_edges.sh OUT_DIR   (env BENCH_SEQ, default 8192,16384;
#                                                WINDOWS, default 256 1024 4096)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_window_edges.sh OUT_DIR}"
mkdir -p "$OUT"
export BENCH_D=128 BENCH_DTYPE=bf16 BENCH_SEQ="${BENCH_SEQ:-8192,16384}"
for r in 1 2 3; do
  BENCH_CAUSAL=1 BENCH_PATH=sm90dyn BENCH_OUT="$OUT/causal_r$r.json" \
    timeout 60 examples/bench_fwd > "$OUT/causal_r$r.txt" 2>&1
  for w in ${WINDOWS:-256 1024 4096}; do
    for path in sm90dyn sm90chain; do
      BENCH_CAUSAL=0 BENCH_WINDOW=$w BENCH_PATH=$path BENCH_OUT="$OUT/w${w}_${path}_r$r.json" \
        timeout 60 examples/bench_fwd > "$OUT/w${w}_${path}_r$r.txt" 2>&1 || echo "w$w $path r$r failed"
    done
  done
  echo "round $r (${SECONDS}s)"
done
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
med = {}
for f in glob.glob(os.path.join(out, "*_r[123].json")):
    key = os.path.basename(f).rsplit("_r", 1)[0]
    for row in json.load(open(f))["rows"]:
        med.setdefault((key, row["n"]), []).append(row["fwd_tflops"])
med = {k: statistics.median(v) for k, v in med.items()}
for (key, n), t in sorted(med.items(), key=lambda x: (x[0][1], x[0][0])):
    c = med.get(("causal", n))
    line = f"n {n:6} {key:18} {t:7.1f} TFLOP/s"
    if c and key != "causal":
        line += f"  / causal {t / c:.3f}"
    if key.endswith("sm90chain"):
        dyn = med.get((key.replace("sm90chain", "sm90dyn"), n))
        if dyn:
            line += f"  chain / dyn {t / dyn:.3f}"
    print(line)
PY
