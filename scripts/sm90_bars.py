#!/usr/bin/env python3
"""Issue 22's bar from the rounds of scripts/sm90_all.sh: per row (dtype, d, causal, n) the
median over rounds of each label's TFLOP/s (LABEL_r{i}.json from examples/bench_fwd) and of
the peers' (cmp_r{i}.json from scripts/bench_compare.py: SDPA flash, cuDNN, FlexAttention
when timed); then, for each sm90 label, the median over rounds of its per-round ratios
against our sm80 path (label `sm80`) and each peer, with the geomean and minimum over the
rows from 2K.

Usage: python3 scripts/sm90_bars.py OUT_DIR LABEL... (the labels of SM90_RUNS; `sm80` is
the baseline).
"""
import glob
import json
import math
import os
import statistics
import sys

PEERS = [("flash", "sdpa_flash_tflops"), ("cudnn", "sdpa_cudnn_tflops"), ("flex", "flex_tflops")]


def key(r):
    return (r["dtype"], r["d"], bool(r["causal"]), r["n"])


def load_rounds(out, stem):
    """{round: {row key: row}} for OUT/stem_r{i}.json."""
    rounds = {}
    for path in sorted(glob.glob(os.path.join(out, f"{stem}_r*.json"))):
        i = path[len(os.path.join(out, stem)) + 2:-5]
        with open(path) as f:
            rounds[i] = {key(r): r for r in json.load(f)["rows"]}
    return rounds


def tflops(row, field="fwd_tflops"):
    if row is None or row.get("error"):
        return None
    x = row.get(field)
    return x if x and x > 0 and not math.isnan(x) else None


def median_ratio(ours, base, k, field):
    """Median over the rounds both have of ours[k] / base[k][field]."""
    rs = []
    for i, rows in ours.items():
        a = tflops(rows.get(k))
        b = tflops(base.get(i, {}).get(k), field)
        if a and b:
            rs.append(a / b)
    return statistics.median(rs) if rs else None


def main():
    out, labels = sys.argv[1], sys.argv[2:]
    runs = {lab: load_rounds(out, lab) for lab in labels}
    peers = load_rounds(out, "cmp")
    keys = sorted({k for r in runs.values() for rows in r.values() for k in rows})
    fmt = lambda x: "    -" if x is None else f"{x:5.2f}"
    summary = {}
    for lab in labels:
        if lab == "sm80" or not runs[lab]:
            continue
        cols = [("sm80", runs.get("sm80", {}), "fwd_tflops")] + [
            (name, peers, field) for name, field in PEERS]
        print(f"== {lab}: median TFLOP/s and median per-round ratios")
        print(f"{'dtype':5} {'d':>3} {'c':>1} {'n':>5} {'TFLOP/s':>8}  " +
              "  ".join(f"/{name:5}" for name, _, _ in cols))
        ratios = {name: [] for name, _, _ in cols}
        for k in keys:
            ts = [tflops(rows.get(k)) for rows in runs[lab].values()]
            ts = [t for t in ts if t]
            if not ts:
                continue
            rs = [median_ratio(runs[lab], base, k, field) for _, base, field in cols]
            for (name, _, _), r in zip(cols, rs):
                if r is not None and k[3] >= 2048:
                    ratios[name].append((r, k))
            print(f"{k[0]:5} {k[1]:3} {int(k[2]):1} {k[3]:5} {statistics.median(ts):8.1f}  " +
                  "  ".join(f"{fmt(r):>6}" for r in rs))
        for name, rs in ratios.items():
            if not rs:
                continue
            g = math.exp(sum(math.log(r) for r, _ in rs) / len(rs))
            lo, lk = min(rs)
            print(f"   {lab}/{name}: geomean {g:.3f} over {len(rs)} rows from 2K, "
                  f"min {lo:.3f} at {lk}")
            summary[f"{lab}/{name}"] = {"geomean": g, "min": lo, "min_row": list(lk),
                                        "rows": len(rs)}
    with open(os.path.join(out, "bars.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
