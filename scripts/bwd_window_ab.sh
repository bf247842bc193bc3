#!/usr/bin/env bash
# The windowed backward of this build against another, side by side: bench_window's
# backward rows (bf16 d128 b2 h16, the runtime's tile rule) at each N, BENCH_RUNS
# interleaved runs (base, new, base, new, ...), then per (N, row) the medians: ms of both
# builds, new / base speed, and each build's TFLOP/s ratios against its own causal row
# (unmasked and visited work). Session 35 measured the BwdPost fold with it
# (docs/wip/bwd-dq-fold.patch, docs/bench/session35/).
#
#   bash scripts/bwd_window_ab.sh OUT_DIR   (from target/gb, after BUNDLE_REVS="base=REV"
#                                            BUNDLE_REV_EXAMPLES="bench_window")
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: bwd_window_ab.sh OUT_DIR}"
mkdir -p "$OUT"
export BENCH_PASS=bwd BENCH_ROUNDS=1 BENCH_ROWS="${ROWS:-causal,window256,window1024,window4096}"
for n in ${NS:-8192 32768}; do
  for r in $(seq 1 "${BENCH_RUNS:-3}"); do
    for build in base new; do
      exe=examples/bench_window; [ "$build" = base ] && exe=examples/bench_window_base
      BENCH_N=$n timeout 200 "$exe" > "$OUT/$build.n$n.r$r.jsonl" 2> "$OUT/$build.n$n.r$r.err"
      echo "n=$n run=$r $build rc=$?"
    done
  done
done
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for f in glob.glob(f"{out}/*.jsonl"):
    build = f.split("/")[-1].split(".")[0]
    for line in open(f):
        d = json.loads(line)
        if d.get("summary"):
            continue
        rows.setdefault((d["n"], d["row"], build), []).append(d)
med = lambda xs: statistics.median(xs)
print(f"{'N':>6} {'row':12} {'base ms':>9} {'new ms':>9} {'new/base speed':>15} "
      f"{'unmasked vs causal base/new':>28} {'visited vs causal base/new':>27}")
for (n, row, build) in sorted(k for k in rows if k[2] == "new"):
    b, nw = rows.get((n, row, "base"), []), rows[(n, row, "new")]
    if not b:
        continue
    bm, nm = med([d["ms"] for d in b]), med([d["ms"] for d in nw])
    def ratio(ds, key):
        xs = [d[key] for d in ds if key in d]
        return f"{med(xs):.3f}" if xs else "  -  "
    print(f"{n:>6} {row:12} {bm:9.3f} {nm:9.3f} {bm / nm:15.3f} "
          f"{ratio(b, 'unmasked_vs_twin'):>13} / {ratio(nw, 'unmasked_vs_twin'):<12} "
          f"{ratio(b, 'visited_vs_twin'):>12} / {ratio(nw, 'visited_vs_twin'):<12}")
PY
