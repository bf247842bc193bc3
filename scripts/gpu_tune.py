#!/usr/bin/env python3
"""Tile tuning: our forward and backward from one PTX directory next to
PyTorch SDPA's flash backend (FA2), in one process, on a few rows of the FA2-paper sweep.

Usage: python3 gpu_tune.py PTX_DIR [--label L] [--dims 64,128,256] [--seqs 1024,16384]
       [--pass fwd,bwd] [--causal 0,1] [--dtype bf16] [--atomic] [--standard] [--once]
PTX_DIR is `flash-codegen emit --all --out-dir PTX_DIR [--tile ...]` output; every launch
is driven by its manifest.json. Backward = bwdpre + bwd (no dQ) + bwddq, the deterministic
mode (--atomic: the runtime's default mode, bwdpre, which also zeroes dq_accum, + bwd with
dq_accum + bwdpost; its bwd on the long tiling from the manifest's min_seqlen_q on, as the
runtime does, unless --standard); FA2's backward is timed as `out.backward` (grads reset), as in
bench_compare_bwd.py, but on [b, s, h, d] memory viewed as [b, h, s, d] (FA2's own
layout; at 512-2K tokens FA2 runs up to ~20% faster on it than on the [b, h, s, d]-
contiguous inputs of the sweep). Medians of triton.testing.do_bench. One line per row:
LABEL pass dtype d causal seqlen ours_TF fa2_TF ratio. --once runs every launcher once,
untimed (for `ncu -k regex:'fa2_|flash'`).
"""
import warnings; warnings.filterwarnings("ignore", category=DeprecationWarning)
import math, os, sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check_bwd as g  # noqa: E402  (reads PTX_DIR from argv[1])

LABEL = arg("--label", os.path.basename(os.path.normpath(sys.argv[1])))
DIMS = [int(x) for x in arg("--dims", "64,128,256").split(",")]
SEQS = [int(x) for x in arg("--seqs", "1024,4096,16384").split(",")]
PASSES = arg("--pass", "fwd,bwd").split(",")
CAUSAL = [bool(int(x)) for x in arg("--causal", "0,1").split(",")]
ONCE = "--once" in sys.argv
ATOMIC = "--atomic" in sys.argv
STANDARD = "--standard" in sys.argv
DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16}[arg("--dtype", "bf16")]


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def ours(q, k, v, do, causal):
    """(forward launcher, backward launcher: deterministic, or atomic with --atomic) on
    manifest-driven launches."""
    b, n, h, d = q.shape
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[q.dtype]
    c = "_causal" if causal else ""
    o, lse = torch.empty_like(q), torch.empty(b, h, n, device="cuda")
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dvec = torch.empty(b, h, n, device="cuda")
    accum = torch.empty(b, h, (n + 15) // 16 * 16, d, device="cuda") if ATOMIC else None
    vals = {"seqlen_q": n, "seqlen_k": n, "head_dim": d, "heads": h, "heads_per_kv": 1,
            "scale_log2": g.LOG2E / math.sqrt(d), "softmax_scale": 1 / math.sqrt(d),
            "q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(),
            "lse": lse.data_ptr(), "dvec": dvec.data_ptr(), "dq_accum": accum.data_ptr() if ATOMIC else 0, "dq": dq.data_ptr(),
            "dk": dk.data_ptr(), "dv": dv.data_ptr(), "do": do.data_ptr()}
    for nm, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dk), ("dv", dv)):
        g.strides(vals, nm, t)
    name = {p: f"fa2_{p}_d{d}_{dt}{c if p in ('fwd', 'bwd', 'bwddq') else ''}_sm80"
            for p in ("fwd", "bwdpre", "bwd", "bwddq", "bwdpost")}
    # the runtime's rule: the bwd's long tiling in atomic mode from min_seqlen_q rows on
    long = name["bwd"].replace("_sm80", "_long_sm80")
    if ATOMIC and not STANDARD and long in g.MAN and n >= g.MAN[long]["min_seqlen_q"]:
        name["bwd"] = long

    def grid(p):
        t = g.MAN[name[p]]["tiles"]
        per = t["block_n"] if p == "bwd" else t["block_m"]
        return (g.cdiv(n, per), h, b)

    def fwd():
        g.launch(name["fwd"], grid("fwd"), vals)

    def bwd():
        for p in ("bwdpre", "bwd", "bwdpost" if ATOMIC else "bwddq"):
            g.launch(name[p], grid(p), vals)

    return fwd, bwd


def fa2(q, k, v, do, causal):
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(True) for x in (q, k, v))
    dot = do.transpose(1, 2)

    def fwd():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    out = fwd()

    def bwd():
        qt.grad = kt.grad = vt.grad = None
        out.backward(dot, retain_graph=True)

    return fwd, bwd


def main():
    print(f"{'label':14s} pass dtype   d causal   seq   ours    fa2  ratio", flush=True)
    for d in DIMS:
        for causal in CAUSAL:
            for n in SEQS:
                b, h = 16384 // n, 2048 // d
                q, k, v, do = (torch.randn(b, n, h, d, device="cuda", dtype=DTYPE) for _ in range(4))
                fl = 4.0 * b * h * n * n * d / (2 if causal else 1)
                mine, theirs = ours(q, k, v, do, causal), fa2(q, k, v, do, causal)
                mine[0]()  # the backward reads our O and LSE
                if ONCE:
                    mine[1](), theirs[1]()
                    torch.cuda.synchronize()
                    continue
                for i, p in enumerate(("fwd", "bwd")):
                    if p not in PASSES:
                        continue
                    f = fl * (2.5 if p == "bwd" else 1.0)
                    t_ours, t_fa2 = bench(mine[i]), bench(theirs[i])
                    print(f"{LABEL:14s} {p:4s} {arg('--dtype', 'bf16'):5s} {d:3d} {int(causal):6d} {n:5d} "
                          f"{f / t_ours / 1e9:6.1f} {f / t_fa2 / 1e9:6.1f} {t_fa2 / t_ours:6.3f}", flush=True)


if __name__ == "__main__":
    main()
