#!/usr/bin/env python3
"""The paged KV-cache bars from bench_paged runs (examples/bench_paged, one JSON line a
row, each row already the median of its in-run rounds): per row the median over the
runs of contig_us / paged_us, then per page size the geomean and the worst row against
the issue's bars (page 16 within 10% of contiguous: >= 0.90; page 256 within 3%:
>= 0.97; every row within 0.02 below the bar).

Usage: python3 paged_bars.py RUN.jsonl [RUN.jsonl ...]
"""
import json
import math
import statistics
import sys

BARS = {"vs16": 0.90, "vs256": 0.97}


def main(paths):
    rows = {}
    for path in paths:
        for line in open(path):
            j = json.loads(line)
            if j.get("summary"):
                continue
            key = (j["kind"], j["b"], j["L"], j["sq"], j["h"], j["hk"], j["d"])
            if "error" in j:
                print("ERROR", key, j["error"])
                continue
            rows.setdefault(key, []).append(j)
    ok = True
    for ratio, bar in BARS.items():
        med = {}
        for key, runs in rows.items():
            med[key] = statistics.median(r[ratio] for r in runs)
        vals = list(med.values())
        geo = math.exp(sum(math.log(v) for v in vals) / len(vals))
        worst_key = min(med, key=med.get)
        worst = med[worst_key]
        met = geo >= bar and worst >= bar - 0.02
        ok &= met
        print(f"{ratio}: bar {bar:.2f}; {len(vals)} rows, geomean {geo:.3f}, worst {worst:.3f} "
              f"{worst_key}: {'met' if met else 'NOT met'}")
        for key in sorted(med):
            flag = "" if med[key] >= bar - 0.02 else "  <-- below"
            print(f"  {key[0]:8} b={key[1]:<3} L={key[2]:<6} sq={key[3]:<3} h={key[4]}/{key[5]} "
                  f"d={key[6]:<3} {med[key]:.3f} (runs: "
                  + ", ".join(f"{r[ratio]:.3f}" for r in rows[key]) + f"){flag}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
