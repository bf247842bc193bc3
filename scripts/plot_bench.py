#!/usr/bin/env python3
"""Plots benchmark sweeps as PNG bar charts in the style of FlashAttention's figures:
TFLOP/s against sequence length, ours next to FlashAttention-2 (PyTorch SDPA flash) and
cuDNN (SDPA cuDNN), one panel per head dim and mask.

Usage:
    python3 scripts/plot_bench.py                     # the committed sweeps -> docs/img/
    python3 scripts/plot_bench.py --fwd F --bwd B --out-dir DIR --dtype bf16

Inputs are the files the comparison scripts write: the JSON of `bench_compare.py` /
`bench_compare_bwd.py` (rows with `fwd_tflops` or `bwd_tflops`, `sdpa_flash[_bwd]_tflops`,
`sdpa_cudnn[_bwd]_tflops`) or their printed table (`.txt`, one line per row:
`bf16  d=128 causal=1 n= 4096  ours 288.80  flash 303.26  cudnn 571.03 TFLOP/s ...`).
Needs matplotlib (`python3 -m pip install matplotlib`); no GPU.
"""
import argparse
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERIES = [("ours", "flash-ptx (ours)", "#d62728"), ("flash", "FlashAttention-2 (SDPA flash)", "#1f77b4"),
          ("cudnn", "cuDNN (SDPA cuDNN)", "#7f7f7f")]
LINE = re.compile(r"^(bf16|f16)\s+d=\s*(\d+)\s+causal=([01])\s+n=\s*(\d+)\s+ours\s+(\S+)\s+flash\s+(\S+)"
                  r"\s+cudnn\s+(\S+)")


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # NaN -> missing


def load(path):
    """Rows {dtype, d, causal, n, ours, flash, cudnn} (TFLOP/s, None when missing)."""
    rows = []
    if path.endswith(".json"):
        with open(path) as f:
            data = json.load(f)
        for r in data.get("rows", []):
            p = "bwd" if any(k.startswith("bwd_") or "_bwd_" in k for k in r) else "fwd"
            sfx = "_bwd" if p == "bwd" else ""
            rows.append(dict(dtype=r["dtype"], d=int(r["d"]), causal=bool(r["causal"]), n=int(r["n"]),
                             ours=None if r.get("error") else num(r.get(f"{p}_tflops")),
                             flash=num(r.get(f"sdpa_flash{sfx}_tflops")),
                             cudnn=num(r.get(f"sdpa_cudnn{sfx}_tflops"))))
    else:
        with open(path) as f:
            for line in f:
                m = LINE.match(line.strip())
                if m:
                    dt, d, c, n, o, fl, cu = m.groups()
                    rows.append(dict(dtype=dt, d=int(d), causal=c == "1", n=int(n),
                                     ours=num(o), flash=num(fl), cudnn=num(cu)))
    if not rows:
        raise SystemExit(f"{path}: no benchmark rows found")
    return rows


def seqlen_label(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def plot(rows, dtype, title, out):
    rows = [r for r in rows if r["dtype"] == dtype]
    if not rows:
        raise SystemExit(f"no {dtype} rows for {out}")
    dims = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(2, len(dims), figsize=(4.6 * len(dims), 7.2), squeeze=False)
    top = max(r[k] or 0 for r in rows for k, _, _ in SERIES) * 1.18
    width = 0.27
    for col, d in enumerate(dims):
        for row, causal in enumerate((False, True)):
            ax = axes[row][col]
            sel = sorted((r for r in rows if r["d"] == d and r["causal"] == causal), key=lambda r: r["n"])
            xs = range(len(sel))
            for i, (key, label, color) in enumerate(SERIES):
                vals = [r[key] or 0 for r in sel]
                bars = ax.bar([x + (i - 1) * width for x in xs], vals, width, label=label, color=color)
                for b, v in zip(bars, vals):
                    if v:
                        ax.text(b.get_x() + b.get_width() / 2, v + top * 0.01, f"{v:.0f}", ha="center",
                                va="bottom", fontsize=6.5, rotation=90)
            ax.set_xticks(list(xs), [seqlen_label(r["n"]) for r in sel])
            ax.set_ylim(0, top)
            ax.set_title(f"head dim {d}, {'causal' if causal else 'no mask'}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s")
            if row == 1:
                ax.set_xlabel("sequence length")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 0.955), frameon=False)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(out, dpi=90)
    plt.close(fig)
    print(f"wrote {out} ({os.path.getsize(out) // 1024} KiB)")


def main():
    bench = os.path.join(ROOT, "docs", "bench")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    fwd_default = os.path.join(bench, "fwd_sweep_v7.json")
    if not os.path.exists(fwd_default):
        fwd_default = os.path.join(bench, "fwd_sweep_v4.txt")
    ap.add_argument("--fwd", default=fwd_default, help="forward sweep (.json or .txt)")
    ap.add_argument("--bwd", default=os.path.join(bench, "bwd_sweep_v6.json"), help="backward sweep (.json or .txt)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    ap.add_argument("--gpu", default="H200", help="GPU name for the titles")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    setup = "hidden 2048, 16K tokens"
    for name, path, what in (("fwd", a.fwd, "Forward"), ("bwd", a.bwd, "Backward")):
        if not os.path.exists(path):
            print(f"skipping {name}: {path} not found")
            continue
        title = f"{what} speed on {a.gpu}, {a.dtype} ({setup}; from {os.path.basename(path)})"
        plot(load(path), a.dtype, title, os.path.join(a.out_dir, f"{name}_{a.dtype}.png"))


if __name__ == "__main__":
    main()
