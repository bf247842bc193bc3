"""One line per row of examples/bench_window's JSON lines (the summary line skipped): n,
row, kernel, median ms, unmasked and visited TFLOP/s, and the ratios to the row's twin.

    python3 scripts/bench_window_rows.py FILE.jsonl
"""
import json
import sys

for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("summary"):
        continue
    print(f"{r['n']:6d} {r['row']:12s} {r['kernel'][-28:]:28s} {r['ms']:8.3f} ms "
          f"unmasked {r['tflops_unmasked']:6.1f} visited {r['tflops_visited']:6.1f} "
          f"vs twin {r.get('unmasked_vs_twin', 0):.3f} / {r.get('visited_vs_twin', 0):.3f}")
