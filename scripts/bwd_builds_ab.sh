#!/usr/bin/env bash
# The windowed backward of several builds side by side (bench_window's backward rows,
# bf16 d128 b2 h16, the runtime's tile rule): BENCH_RUNS interleaved rounds (default 3),
# each running every build in BUILDS in turn (`examples/bench_window_<name>`; `new` is
# examples/bench_window), then per (N, row) each build's median ms, its speed over the
# first build's, and its unmasked / visited TFLOP/s ratios against its own causal row.
# Several candidate patches measured in one device command: bundle each as a commit with
# BUNDLE_REVS="base=main a=BRANCH_A ..." BUNDLE_REV_EXAMPLES=bench_window.
#
#   BUILDS="base a b new" NS=8192 bash scripts/bwd_builds_ab.sh OUT_DIR   (from target/gb)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: bwd_builds_ab.sh OUT_DIR}"
mkdir -p "$OUT"
BUILDS="${BUILDS:-base new}"
export BENCH_PASS=bwd BENCH_ROUNDS=1 BENCH_ROWS="${ROWS:-causal,window256,window1024,window4096}"
for n in ${NS:-8192}; do
  for r in $(seq 1 "${BENCH_RUNS:-3}"); do
    for build in $BUILDS; do
      exe=examples/bench_window_$build; [ "$build" = new ] && exe=examples/bench_window
      BENCH_N=$n timeout 200 "$exe" > "$OUT/$build.n$n.r$r.jsonl" 2> "$OUT/$build.n$n.r$r.err"
      echo "n=$n run=$r $build rc=$?"
    done
  done
done
python3 - "$OUT" $BUILDS <<'PY'
import glob, json, statistics, sys
out, builds = sys.argv[1], sys.argv[2:]
rows = {}
for f in glob.glob(f"{out}/*.jsonl"):
    build = f.split("/")[-1].split(".")[0]
    for line in open(f):
        d = json.loads(line)
        if not d.get("summary"):
            rows.setdefault((d["n"], d["row"], build), []).append(d)
med = statistics.median
first = builds[0]
print(f"{'N':>6} {'row':12} " + " ".join(f"{b + ' ms':>10} {b + '/' + first:>10} {'unm/vis':>11}" for b in builds))
for n, row in sorted({(k[0], k[1]) for k in rows}):
    base = rows.get((n, row, first))
    line = f"{n:>6} {row:12} "
    for b in builds:
        ds = rows.get((n, row, b), [])
        if not ds or not base:
            line += f"{'-':>10} {'-':>10} {'-':>11} "
            continue
        ms = med([d["ms"] for d in ds])
        ratio = lambda key: f"{med([d[key] for d in ds if key in d]):.3f}" if any(key in d for d in ds) else "-"
        line += f"{ms:10.3f} {med([d['ms'] for d in base]) / ms:10.3f} {ratio('unmasked_vs_twin')}/{ratio('visited_vs_twin'):<5} "
    print(line)
PY
