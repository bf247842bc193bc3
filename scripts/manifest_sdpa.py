#!/usr/bin/env python3
"""Runs flash-ptx's generated PTX from Python through manifest.json alone and compares it
with PyTorch's scaled_dot_product_attention (forward and backward).

Usage:
    flash-codegen emit --all --out-dir ptx-out     # or: cargo run --release -p flash-codegen -- ...
    python3 scripts/manifest_sdpa.py ptx-out [--no-bwd]

Needs a GPU (sm_80 or newer), CuPy and PyTorch; no Rust. Everything about a kernel is
read from PTX_DIR/manifest.json: which kernel serves a problem (spec fields), its file and
entry name, its parameters (order, names, numpy types), its block, its grid (the formula
strings, evaluated here), its dynamic shared memory and whether the opt-in is needed. The
only knowledge outside the manifest is the order of the backward passes (README, "Kernels"):
bwdpre -> bwd -> bwdpost (atomic), or bwdpre -> bwd -> bwddq (deterministic), with
bwdkvsum after bwd when a grouped-query case splits its group (here: two CTAs per group).

Per case: max abs and rel-L2 of ours vs SDPA in the same dtype (q, k, v transposed to
[b, h, s, d]), and, for scale, of each vs SDPA in float64. Exits non-zero when ours differs
from SDPA by more than the dtype's tolerance.
"""
import warnings; warnings.filterwarnings("ignore", category=DeprecationWarning)  # CuPy's ExternalStream
import ast
import json
import math
import os
import sys
from fractions import Fraction

import cupy as cp
import numpy as np
import torch
import torch.nn.functional as F

LOG2E = 1.4426950408889634
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.2e-2}  # rel-L2 of ours vs SDPA, same dtype
DTYPE = {torch.float16: "f16", torch.bfloat16: "bf16"}


class Manifest:
    def __init__(self, ptx_dir):
        self.dir = ptx_dir
        with open(os.path.join(ptx_dir, "manifest.json")) as f:
            man = json.load(f)
        if man.get("format") not in (2, 3):  # 3 only added the sm90a section
            raise SystemExit(f"manifest.json has format {man.get('format')}; this script reads formats 2 and 3")
        self.kernels = man["kernels"]
        self.fns = {}

    def pick(self, pass_, d, dtype, causal, seqlen_q=0, atomic=False):
        """The manifest's rule (notes.kernel_choice): same pass, dtype and mask,
        smallest head_dim >= d, standard tiling; a long tiling instead when the problem has
        at least its min_seqlen_q query rows and the backward runs in atomic mode."""
        fits = [k for k in self.kernels
                if k["spec"]["pass"] == pass_ and k["spec"]["dtype"] == DTYPE[dtype]
                and k["spec"]["mask"] == ("causal" if causal else "none") and k["spec"]["head_dim"] >= d
                and k["spec"].get("tiling", "standard") == "standard"]
        if not fits:
            raise SystemExit(f"no {pass_} kernel for d={d} {DTYPE[dtype]} causal={causal} in the manifest")
        best = min(fits, key=lambda k: k["spec"]["head_dim"])
        long = [k for k in self.kernels
                if {**k["spec"], "tiling": "standard"} == best["spec"] and k["spec"].get("tiling") == "long"
                and atomic and seqlen_q >= k["min_seqlen_q"]]
        return long[0] if long else best

    def function(self, k):
        if k["name"] not in self.fns:
            fn = cp.RawModule(path=os.path.join(self.dir, k["file"])).get_function(k["name"])
            if k["launch"]["needs_smem_opt_in"]:
                fn.max_dynamic_shared_size_bytes = k["launch"]["dynamic_smem_bytes"]
            self.fns[k["name"]] = fn
        return self.fns[k["name"]]

    def launch(self, k, tensors, sizes):
        """Launch kernel entry `k`: arguments by parameter name, grid from its formulas."""
        names = dict(sizes, **k["tiles"])
        grid = tuple(int(evaluate(g, names)) for g in k["launch"]["grid"])
        args = tuple(getattr(np, p["numpy"])(value(p["name"], tensors, sizes)) for p in k["params"])
        smem = k["launch"]["dynamic_smem_bytes"]
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.function(k)(grid, tuple(k["launch"]["block"]), args, shared_mem=smem)
        return k["name"]


def evaluate(formula, names):
    """A grid formula such as `ceil(seqlen_q / block_m)`: names, integers, + - * / <<, ceil()."""
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Name):
            return Fraction(names[n.id])
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return Fraction(n.value)
        if isinstance(n, ast.BinOp) and type(n.op) in OPS:
            return OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "ceil" and len(n.args) == 1:
            return Fraction(math.ceil(ev(n.args[0])))
        raise ValueError(f"unsupported grid formula `{formula}`")
    return ev(ast.parse(formula, mode="eval"))


OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
       ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
       ast.LShift: lambda a, b: Fraction(int(a) << int(b))}
STRIDES = {"batch_stride": 0, "row_stride": 1, "head_stride": 2}


def value(name, tensors, sizes):
    """A parameter's value: a tensor's pointer (0 for None), one of its strides, or a size."""
    if name in tensors:
        t = tensors[name]
        return 0 if t is None else t.data_ptr()
    for suffix, dim in STRIDES.items():
        if name.endswith("_" + suffix) and name[: -len(suffix) - 1] in tensors:
            return tensors[name[: -len(suffix) - 1]].stride(dim)
    if name in sizes:
        return sizes[name]
    raise SystemExit(f"the manifest names a parameter this script does not know: `{name}`")


def ours(man, q, k, v, do, causal, deterministic):
    """Our forward, then (if `do` is given) our backward; everything in [b, s, h, d]."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d)
    sizes = dict(batch=b, seqlen_q=sq, seqlen_k=sk, heads=h, heads_k=hk, head_dim=d,
                 heads_per_kv=h // hk, scale_log2=scale * LOG2E, softmax_scale=scale,
                 # grouped-query: two CTAs per group (f32 partials, then bwdkvsum), as the
                 # manifest's kernel_choice note describes
                 group_split_shift=1 if h // hk >= 2 else 0)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device=q.device)
    t = dict(q=q, k=k, v=v, o=o, lse=lse)
    used = [man.launch(man.pick("fwd", d, q.dtype, causal), t, sizes)]
    if do is None:
        return (o,), used
    t.update(do=do, dq=torch.full_like(q, float("nan")), dk=torch.full_like(k, float("nan")),
             dv=torch.full_like(v, float("nan")), dvec=torch.empty((b, h, sq), device=q.device),
             dq_accum=None if deterministic else torch.empty((b, h, (sq + 15) // 16 * 16, d), device=q.device))
    splits = 1 << sizes["group_split_shift"]
    t.update(dkv_partial=torch.full((splits, 2, b, sk, hk, d), float("nan"), device=q.device)
             if splits > 1 else None)
    passes = ["bwd_pre", "bwd"] + (["bwd_kv_sum"] if splits > 1 else [])
    passes += ["bwd_dq" if deterministic else "bwd_post"]
    for p in passes:
        kern = man.pick(p, d, q.dtype, causal and p in ("bwd", "bwd_dq"), sq, not deterministic)
        used.append(man.launch(kern, t, sizes))
    return (o, t["dq"], t["dk"], t["dv"]), used


def sdpa(q, k, v, do, causal, dtype):
    """SDPA in `dtype` on [b, h, s, d] views; returns o (and dq, dk, dv) in [b, s, h, d]."""
    xs = [x.detach().to(dtype).requires_grad_(do is not None) for x in (q, k, v)]
    gqa = q.shape[2] != k.shape[2]
    o = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in xs), is_causal=causal,
                                       enable_gqa=gqa).transpose(1, 2)
    if do is None:
        return (o,)
    o.backward(do.to(dtype))
    return (o,) + tuple(x.grad for x in xs)


def diff(a, b):
    a, b = a.double(), b.double()
    return (a - b).abs().max().item(), ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def case(man, b, sq, sk, h, hk, d, dtype, causal, bwd, deterministic=False):
    # SDPA's is_causal is top-left aligned, ours (like FlashAttention >= 2.1) bottom-right:
    # the two agree only when sq == sk.
    assert not causal or sq == sk
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    do = torch.randn(b, sq, h, d, device="cuda", dtype=dtype) if bwd else None
    got, used = ours(man, q, k, v, do, causal, deterministic)
    same = sdpa(q, k, v, do, causal, dtype)
    exact = sdpa(q, k, v, do, causal, torch.float64)
    torch.cuda.synchronize()
    mode = ("det" if deterministic else "atomic") if bwd else "fwd"
    print(f"{DTYPE[dtype]:4} b{b} sq{sq} sk{sk} h{h}/{hk} d{d} causal={int(causal)} {mode}: "
          f"{' -> '.join(used)}")
    ok = True
    for name, g, s, x in zip(("o", "dq", "dk", "dv"), got, same, exact):
        (a, r), (_, r_ours), (_, r_sdpa) = diff(g, s), diff(g, x), diff(s, x)
        good = math.isfinite(r) and r <= TOL[dtype]
        ok &= good
        print(f"  {'ok  ' if good else 'FAIL'} {name:2}: vs SDPA max abs {a:.2e} rel-L2 {r:.2e}   "
              f"vs float64: ours {r_ours:.2e}, SDPA {r_sdpa:.2e}")
    return ok


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    man = Manifest(sys.argv[1])
    bwd = "--no-bwd" not in sys.argv
    torch.manual_seed(0)
    bf16, f16 = torch.bfloat16, torch.float16
    cases = [  # b, sq, sk, h, hk, d, dtype, causal
        (2, 1024, 1024, 16, 16, 128, bf16, False),
        (2, 1024, 1024, 16, 16, 128, bf16, True),
        (1, 2048, 2048, 8, 2, 64, f16, True),     # GQA 8/2
        (4, 512, 512, 8, 8, 256, bf16, False),
        (2, 300, 700, 8, 8, 96, f16, False),      # sq != sk, odd lengths
        (1, 333, 333, 4, 1, 72, bf16, True),      # MQA, d72 on the d96 kernel
        (1, 8192, 8192, 4, 2, 128, bf16, True),   # the bwd's long tiling (min_seqlen_q)
    ]
    ok = True
    for c in cases:
        ok &= case(man, *c, bwd=False)
        if bwd:
            ok &= case(man, *c, bwd=True)
    if bwd:
        ok &= case(man, *cases[2], bwd=True, deterministic=True)
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
