#!/usr/bin/env python3
"""The grouped-query backward next to PyTorch SDPA's FlashAttention-2 and cuDNN backends,
from the interleaved runs of scripts/gqa_bwd_all.sh.

Usage: python3 bench_gqa_bwd.py OUT_DIR [SUMMARY.json]   (default OUT_DIR/gqa_summary.json)

Reads OUT_DIR/cmp_r*.json (scripts/bench_compare_bwd.py's output: our rows from
examples/bench_bwd with the peers' times of the same round added); a round without its
cmp file falls back to ours_r*.json (ours only). Per row (dtype, d, causal, n, b,
heads/heads_k, group split, mode) it prints the median over the runs of ours, FA2 and cuDNN
(ms), our TFLOP/s, and the ratios ours/FA2 and ours/cuDNN as TFLOP/s ratios (peer_ms /
ours_ms) taken per run (ours and the peers of the same round), then their median over the
runs; under each table the geomean of those medians over the rows (all rows, and the
grouped-query rows alone) and the worst row. One table per group-split setting (0 =
automatic); rows without GQA (heads_k = heads) ignore the split, run once per round, and
appear in every table. The runs column: rounds with the row / rounds with an ours/FA2
ratio. Needs only python3 (no torch).
"""
import glob
import json
import math
import os
import re
import statistics
import sys

PEERS = (("fa2", "sdpa_flash_bwd_ms"), ("cudnn", "sdpa_cudnn_bwd_ms"))
KEY = ("dtype", "d", "causal", "n", "b", "h", "heads_k", "group_splits", "deterministic", "tiling")


def good(x):
    return isinstance(x, (int, float)) and x > 0 and not math.isnan(x)


def load_runs(out):
    """{run number: (rows, source file)}, cmp_rN.json preferred to ours_rN.json."""
    runs = {}
    for pat in ("ours_r*.json", "cmp_r*.json"):  # cmp second: replaces ours of its round
        for f in glob.glob(os.path.join(out, pat)):
            m = re.search(r"_r(\d+)\.json$", f)
            if not m:
                continue
            try:
                with open(f) as fh:
                    rows = json.load(fh).get("rows", [])
            except (OSError, ValueError) as e:
                print(f"note: skipping {f}: {e}", file=sys.stderr)
                continue
            runs[int(m.group(1))] = (rows, os.path.basename(f))
    return dict(sorted(runs.items()))


def key_of(r):
    r = dict(r)
    r.setdefault("heads_k", r["h"])
    r.setdefault("group_splits", 0)
    r.setdefault("deterministic", False)
    r.setdefault("tiling", "auto")
    return tuple(r[k] for k in KEY)


def gmean(xs):
    xs = [x for x in xs if good(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def med(xs):
    xs = [x for x in xs if good(x)]
    return statistics.median(xs) if xs else None


def fmt(x, spec=".2f"):
    width = re.match(r"\d*", spec).group()
    return "-".rjust(int(width or 0)) if x is None else format(x, spec)


def summarise(runs):
    per = {}  # key -> run -> row
    for i, (rows, _) in runs.items():
        for r in rows:
            per.setdefault(key_of(r), {})[i] = r
    out = []
    for key, by_run in per.items():
        k = dict(zip(KEY, key))
        ours = [r.get("bwd_ms") if not r.get("error") else None for r in by_run.values()]
        s = dict(k, runs=len(by_run), ours_ms=med(ours),
                 errors=sorted({r["error"] for r in by_run.values() if r.get("error")}))
        fb = 2.5 * 4.0 * k["b"] * k["h"] * k["n"] ** 2 * k["d"] / (2 if k["causal"] else 1)
        s["ours_tflops"] = fb / s["ours_ms"] / 1e9 if s["ours_ms"] else None
        for name, field in PEERS:
            s[f"{name}_ms"] = med([r.get(field) for r in by_run.values()])
            ratios = [r[field] / r["bwd_ms"] for r in by_run.values()
                      if not r.get("error") and good(r.get("bwd_ms")) and good(r.get(field))]
            s[f"ours_over_{name}_runs"] = ratios
            s[f"ours_over_{name}"] = med(ratios)
        out.append(s)
    return out


def table(rows, split):
    """The rows of one split setting: its grouped-query rows and every MHA row."""
    sel = [r for r in rows if r["heads_k"] == r["h"] or r["group_splits"] == split]
    sel.sort(key=lambda r: (r["dtype"], r["deterministic"], r["d"], r["causal"],
                            r["h"] // max(r["heads_k"], 1), r["h"], r["n"]))
    return sel


def stats(sel, name):
    xs = [(r, r[f"ours_over_{name}"]) for r in sel if good(r[f"ours_over_{name}"])]
    if not xs:
        return None
    worst = min(xs, key=lambda x: x[1])
    gqa = [v for r, v in xs if r["heads_k"] != r["h"]]
    return {"geomean": gmean([v for _, v in xs]), "rows": len(xs), "geomean_gqa": gmean(gqa),
            "rows_gqa": len(gqa), "worst": worst[1], "worst_row": label(worst[0])}


def label(r):
    mode = " det" if r["deterministic"] else ""
    if r.get("tiling", "auto") != "auto":
        mode += " " + r["tiling"]
    return (f"{r['dtype']} d{r['d']} {'causal' if r['causal'] else 'full'} n{r['n']} b{r['b']} "
            f"{r['h']}/{r['heads_k']}{mode}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(out, "gqa_summary.json")
    runs = load_runs(out)
    if not runs:
        sys.exit(f"no ours_r*.json or cmp_r*.json in {out}")
    print("runs: " + ", ".join(f"r{i} {src} ({len(rows)} rows)" for i, (rows, src) in runs.items()))
    rows = summarise(runs)
    splits = sorted({r["group_splits"] for r in rows if r["heads_k"] != r["h"]}) or [0]
    report = {"runs": {i: src for i, (_, src) in runs.items()}, "tables": []}
    for split in splits:
        sel = table(rows, split)
        print(f"\n== group splits {split} ({'automatic' if split == 0 else 'fixed'}); ms: median "
              f"over runs; ours/peer: TFLOP/s ratio (peer_ms / ours_ms), median of per-run ratios")
        print(f"{'row':40s} {'runs':>5s} {'ours ms':>9s} {'fa2 ms':>9s} {'cudnn ms':>9s} "
              f"{'TFLOP/s':>7s} {'/fa2':>6s} {'/cudnn':>6s}")
        for r in sel:
            err = ("  " + r["errors"][0][:60]) if r["errors"] else ""
            runs = f"{r['runs']}/{len(r['ours_over_fa2_runs'])}"
            print(f"{label(r):40s} {runs:>5s} {fmt(r['ours_ms'], '9.3f')} "
                  f"{fmt(r['fa2_ms'], '9.3f')} {fmt(r['cudnn_ms'], '9.3f')} "
                  f"{fmt(r['ours_tflops'], '7.1f')} {fmt(r['ours_over_fa2'], '6.3f')} "
                  f"{fmt(r['ours_over_cudnn'], '6.3f')}{err}")
        t = {"group_splits": split, "rows": sel}
        for name, _ in PEERS:
            st = t[f"ours_over_{name}"] = stats(sel, name)
            if st:
                print(f"geomean ours/{name}: {st['geomean']:.3f} over {st['rows']} rows "
                      f"(GQA rows alone: {fmt(st['geomean_gqa'], '.3f')} over {st['rows_gqa']}); "
                      f"worst {st['worst']:.3f} at {st['worst_row']}")
            else:
                print(f"geomean ours/{name}: no rows")
        report["tables"].append(t)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print("\nwrote", path)


if __name__ == "__main__":
    main()
