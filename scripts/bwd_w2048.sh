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
