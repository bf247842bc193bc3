#!/usr/bin/env bash
# Interleaved rounds of examples/bench_fwd (from target/gb) over labelled configurations,
# then each row's median TFLOP/s and its ratio to a base label's on the same row:
#
#   bash scripts/sm90_fwd_variants.sh OUT_DIR BASE "label:VAR=v,VAR=v label:..." ["label=base ..."]
#
# Each configuration is bench_fwd's env (BENCH_PATH, BENCH_CAUSAL, BENCH_WINDOW,
# BENCH_SOFTCAP, BENCH_FMA_EXP2, ...) over the rows of the caller's BENCH_D, BENCH_SEQ and
# BENCH_DTYPE; `BIN=name` runs examples/name (another build in the bundle, such as
# bench_fwd_base from BUNDLE_REVS) instead of examples/bench_fwd; ROUNDS (default 3)
# rounds run every configuration in turn. The optional
# fourth argument pairs labels with their own base (a twin: the same rows without a
# modifier), printed before the ratio to BASE; the rest are compared with BASE only.
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: sm90_fwd_variants.sh OUT_DIR BASE CONFIGS [PAIRS]}"
BASE="$2"
CONFIGS="$3"
PAIRS="${4:-}"
mkdir -p "$OUT"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for cfg in $CONFIGS; do
    label=${cfg%%:*}; vars=${cfg#*:}
    bin=$(echo "$vars" | tr ',' '\n' | sed -n 's/^BIN=//p')
    env $(echo "$vars" | tr ',' ' ') BENCH_OUT="$OUT/${label}_r$r.json" \
      timeout 90 "examples/${bin:-bench_fwd}" > "$OUT/${label}_r$r.txt" 2>&1 || echo "$label r$r failed"
  done
  echo "round $r (${SECONDS}s)"
done
python3 - "$OUT" "$BASE" "$PAIRS" <<'PY'
import glob, json, os, statistics, sys
out, base, pairs = sys.argv[1], sys.argv[2], dict(p.split("=") for p in sys.argv[3].split())
med = {}
for f in glob.glob(os.path.join(out, "*_r*.json")):
    label = os.path.basename(f).rsplit("_r", 1)[0]
    for row in json.load(open(f))["rows"]:
        key = (row["dtype"], row["d"], row["n"])
        med.setdefault((label, key), []).append(row["fwd_tflops"])
med = {k: statistics.median(v) for k, v in med.items()}
for (label, key), t in sorted(med.items(), key=lambda x: (x[0][1], x[0][0])):
    ref = pairs.get(label, base)
    line = f"{key[0]:5} d{key[1]:<4} n {key[2]:6} {label:18} {t:7.1f} TFLOP/s"
    if ref != label and (ref, key) in med:
        line += f"  / {ref} {t / med[(ref, key)]:.3f}"
    if ref != base and base != label and (base, key) in med:
        line += f"  / {base} {t / med[(base, key)]:.3f}"
    print(line)
PY
