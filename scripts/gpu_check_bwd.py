#!/usr/bin/env python3
"""GPU check of the generated backward PTX with CuPy + PyTorch (float64 autograd reference).

Usage: python3 gpu_check_bwd.py PTX_DIR [--quick]
PTX_DIR holds the `flash-codegen emit --all` output (every .ptx plus manifest.json). The
launch of every pass is driven by manifest.json alone (parameter order and types, block,
dynamic shared memory). Runs our forward, then the backward in atomic mode (bwdpre ->
bwd with dq_accum -> bwdpost) and deterministic mode (bwdpre -> bwd -> bwddq, twice,
bitwise compared); the bwd kernels with a long-sequence tiling (`..._long_sm80`, d128)
run the atomic cases on it as well, at every length (the runtime picks them from
min_seqlen_q on). Exits non-zero on any failure.
"""
import warnings; warnings.filterwarnings("ignore", category=DeprecationWarning)
import json, math, os, sys
import numpy as np
import cupy as cp
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

PTX_DIR = sys.argv[1]
QUICK = "--quick" in sys.argv
LOG2E = 1.4426950408889634
HEAD_DIMS = [32, 64, 96, 128, 160, 192, 224, 256]
_MAN = json.load(open(os.path.join(PTX_DIR, "manifest.json")))
assert _MAN.get("format") in (2, 3), f"manifest.json format {_MAN.get('format')}, expected 2 or 3"
MAN = {k["name"]: k for k in _MAN["kernels"]}
_fn = {}
NP = {"u64": np.uint64, "u32": np.uint32, "f32": np.float32}


def launch(name, grid, vals):
    k = MAN[name]
    if name not in _fn:
        f = cp.RawModule(path=os.path.join(PTX_DIR, k["file"])).get_function(name)
        f.max_dynamic_shared_size_bytes = k["launch"]["dynamic_smem_bytes"]
        _fn[name] = f
    args = tuple(NP[p["type"]](vals[p["name"]]) for p in k["params"])
    with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        _fn[name](tuple(grid), tuple(k["launch"]["block"]), args, shared_mem=k["launch"]["dynamic_smem_bytes"])


def strides(vals, name, t):
    st = t.stride()
    vals.update({f"{name}_batch_stride": st[0], f"{name}_row_stride": st[1], f"{name}_head_stride": st[2]})


def cdiv(a, b):
    return (a + b - 1) // b


def run(q, k, v, do, causal, deterministic, long=False):
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kd = next(x for x in HEAD_DIMS if x >= d)
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[q.dtype]
    c = "_causal" if causal else ""
    scale = 1.0 / math.sqrt(d)
    dev = q.device
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device=dev)
    base = {"seqlen_q": sq, "seqlen_k": sk, "head_dim": d, "heads": h, "heads_per_kv": h // hk,
            "scale_log2": scale * LOG2E, "softmax_scale": scale,
            "group_split_shift": 0, "dkv_partial": 0}  # (one CTA per group)
    vals = dict(base, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr())
    for n, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        strides(vals, n, t)
    fwd = f"fa2_fwd_d{kd}_{dt}{c}_sm80"
    launch(fwd, (cdiv(sq, MAN[fwd]["tiles"]["block_m"]), h, b), vals)
    dq = torch.full_like(q, float("nan"))
    dk = torch.full_like(k, float("nan"))
    dv = torch.full_like(v, float("nan"))
    dvec = torch.full((b, h, sq), float("nan"), device=dev)
    accum = torch.full((b, h, (sq + 15) // 16 * 16, d), float("nan"), device=dev) if not deterministic else None
    vals = dict(base, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(),
                dvec=dvec.data_ptr(), dq_accum=accum.data_ptr() if accum is not None else 0,
                dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr(), **{"do": do.data_ptr()})
    for n, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dk), ("dv", dv)):
        strides(vals, n, t)
    pre, main = f"fa2_bwdpre_d{kd}_{dt}_sm80", f"fa2_bwd_d{kd}_{dt}{c}{'_long' if long else ''}_sm80"
    launch(pre, (cdiv(sq, MAN[pre]["tiles"]["block_m"]), h, b), vals)
    launch(main, (cdiv(sk, MAN[main]["tiles"]["block_n"]), hk, b), vals)
    if deterministic:
        dqk = f"fa2_bwddq_d{kd}_{dt}{c}_sm80"
        launch(dqk, (cdiv(sq, MAN[dqk]["tiles"]["block_m"]), h, b), vals)
    else:
        post = f"fa2_bwdpost_d{kd}_{dt}_sm80"
        launch(post, (cdiv(sq, MAN[post]["tiles"]["block_m"]), h, b), vals)
    torch.cuda.synchronize()
    return o, lse, dq, dk, dv, main


def reference(q, k, v, do, causal):
    qd, kd, vd, dod = (x.detach().double().requires_grad_(True) for x in (q, k, v, do))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qh, kh, vh = qd.permute(0, 2, 1, 3), kd.permute(0, 2, 1, 3), vd.permute(0, 2, 1, 3)
    kh = kh.repeat_interleave(h // hk, dim=1)
    vh = vh.repeat_interleave(h // hk, dim=1)
    s = (qh @ kh.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    p = p / torch.where(l == 0, torch.ones_like(l), l)
    o = (p @ vh).permute(0, 2, 1, 3)
    o.backward(dod)
    return qd.grad, kd.grad, vd.grad


def fa2_grads(q, k, v, do, causal):
    """FlashAttention-2's (SDPA flash) dq, dk, dv on the same inputs, or None where it does
    not compute the same problem (SDPA's causal mask is top-left aligned, ours bottom-right
    as in FA2's own API: they agree only when sq == sk)."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if (causal and sq != sk) or d % 8 or d > 256:
        return None
    qf, kf, vf = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    kr = kf.repeat_interleave(h // hk, dim=2)
    vr = vf.repeat_interleave(h // hk, dim=2)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        o = torch.nn.functional.scaled_dot_product_attention(
            qf.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2), is_causal=causal)
    o.transpose(1, 2).backward(do)
    return qf.grad, kf.grad, vf.grad


def rel(a, b, floor=1e-30):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(floor)).item()


def has_long(d, dtype, causal):
    """Whether the bwd kernel serving head dim d has a long-sequence tiling."""
    kd = next(x for x in HEAD_DIMS if x >= d)
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    return f"fa2_bwd_d{kd}_{dt}{'_causal' if causal else ''}_long_sm80" in MAN


def case(b, sq, sk, h, hk, d, dtype, causal, deterministic, packed=False, long=False):
    dev = "cuda"
    if packed:
        qkv = torch.randn(b, sq, 3, h, d, device=dev, dtype=dtype)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q = torch.randn(b, sq, h, d, device=dev, dtype=dtype)
        k = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
        v = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
    do = torch.randn(b, sq, h, d, device=dev, dtype=dtype)
    o, lse, dq, dk, dv, name = run(q, k, v, do, causal, deterministic, long)
    rq, rk, rv = reference(q, k, v, do, causal)
    tol = 3.5e-3 if dtype == torch.bfloat16 else 4.5e-4
    # dQ and dK vanish exactly when every row sees one key (sq = sk = 1): measure them
    # against the scale of dV there, not against a zero norm.
    floor = 1e-2 * rv.double().norm().item()
    errs = [rel(dq, rq, floor), rel(dk, rk, floor), rel(dv, rv)]
    nans = sum(int(torch.isnan(x).sum()) for x in (dq, dk, dv))
    # The fixed tolerance is about 1.5x FA2's error at n=1024 (anchors); short causal rows
    # cancel more (a dS row sums to zero), so where a gradient exceeds it, the yardstick is
    # FA2's own error on the same inputs: at most 1.25x of it.
    fa2 = None
    if any(e > tol for e in errs):
        g = fa2_grads(q, k, v, do, causal)
        if g is not None:
            fa2 = [rel(g[0], rq, floor), rel(g[1], rk, floor), rel(g[2], rv)]
    limits = [max(tol, 1.25 * f) for f in fa2] if fa2 else [tol] * 3
    ok = nans == 0 and all(e <= lim for e, lim in zip(errs, limits))
    if deterministic:
        _, _, dq2, dk2, dv2, _ = run(q, k, v, do, causal, True)
        same = all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in ((dq, dq2), (dk, dk2), (dv, dv2)))
        ok &= same
    mode = "det" if deterministic else "atomic"
    extra = f" bitwise={'same' if same else 'DIFF'}" if deterministic else ""
    if fa2 is not None:
        extra += f" (fa2: dq {fa2[0]:.2e} dk {fa2[1]:.2e} dv {fa2[2]:.2e})"
    print(f"{'ok  ' if ok else 'FAIL'} {name:32s} {mode:6s} b{b} sq{sq} sk{sk} h{h}/{hk} d{d}{' packed' if packed else ''}: "
          f"dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e} nan {nans}{extra}", flush=True)
    return ok


def main():
    torch.manual_seed(1)
    ok = True
    dims = HEAD_DIMS + [40, 72, 120, 248]  # 120, 248: column-group edges of d128/d256
    lens = [(1, 1), (17, 17), (128, 128), (1000, 1000), (2061, 2061), (128, 1000), (1000, 128), (17, 300), (300, 17)]
    if QUICK:
        dims, lens = [64, 128], [(17, 17), (300, 300), (128, 1000), (1000, 128)]
    for dtype in (torch.float16, torch.bfloat16):
        for causal in (False, True):
            for d in dims:
                for sq, sk in lens:
                    if sq * sk > 1000 * 1000 and d not in (64, 128):
                        continue
                    ok &= case(1, sq, sk, 2, 2, d, dtype, causal, False)
                    if has_long(d, dtype, causal):
                        ok &= case(1, sq, sk, 2, 2, d, dtype, causal, False, long=True)
            for d in (64, 128, 256):
                ok &= case(2, 300, 300, 8, 2, d, dtype, causal, True)          # GQA, deterministic
                ok &= case(1, 333, 200, 4, 1, d, dtype, causal, True)          # MQA, sq > sk, det
            ok &= case(2, 300, 300, 8, 2, 128, dtype, causal, False)           # GQA atomic
            if has_long(128, dtype, causal):
                ok &= case(2, 300, 300, 8, 2, 128, dtype, causal, False, long=True)
                ok &= case(1, 333, 200, 4, 1, 120, dtype, causal, False, long=True)  # MQA, sq > sk
                if not QUICK or (dtype, causal) == (torch.bfloat16, True):
                    # the length it is chosen from (min_seqlen_q), GQA
                    ok &= case(1, 8192, 8192, 4, 2, 128, dtype, causal, False, long=True)
            ok &= case(2, 257, 513, 8, 1, 64, dtype, causal, False)            # MQA atomic
            ok &= case(3, 333, 333, 4, 4, 96, dtype, causal, False, packed=True)
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
