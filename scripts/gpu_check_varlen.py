#!/usr/bin/env python3
"""GPU check of the varlen (packed sequences) forward and backward from the manifest
alone, with CuPy + PyTorch, against a float64 autograd reference per sequence: what a
user of flash_attn_varlen_func's layout without Rust does, following notes.varlen.

Usage: python3 gpu_check_varlen.py PTX_DIR [--quick | --subset]
q, o, dO, dq [total_q, heads, d] and k, v, dk, dv [total_k, heads_k, d] as views of
buffers with an extra head (head and row strides free); batches mixing empty, length-1,
keyless, queryless and long sequences, Sq != Sk per sequence; causal bottom-right per
sequence; GQA; both backward modes (atomic: bwdpostvarlen, deterministic: bwddqvarlen);
the main pass on its standard kernel and, where the GPU's compute capability reaches its
min_compute_capability, on its wide one. Outputs, D and the dq accumulator inside guard
bands, NaN-poisoned (bwdprevarlen must zero the accumulator). One case feeds garbage
offsets (negative, decreasing, past the totals): it must run and leave the guard bands
alone (under compute-sanitizer with PYTORCH_NO_CUDA_MEMORY_CACHING=1: touch nothing
outside the buffers). Exits non-zero on a failure.
"""
import math, sys
import torch
import gpu_check_kvcache as g

DT = {torch.float16: "f16", torch.bfloat16: "bf16"}
CC = torch.cuda.get_device_capability()


def kernel(pass_, kd, dtype, causal, tiling=""):
    c = "_causal" if causal and pass_ not in ("bwdprevarlen", "bwdpostvarlen") else ""
    return f"fa2_{pass_}_d{kd}_{DT[dtype]}{c}{tiling}_sm80"


def runs_here(name):
    major, minor = map(int, g.KERNELS[name]["min_compute_capability"].split("."))
    return CC >= (major, minor)


def packed(total, heads, d, dtype):
    """A [total, heads, d] view of a buffer with one extra head."""
    buf = torch.randn(max(total, 1), heads + 1, d, device="cuda", dtype=dtype)
    return buf[:total, 1:]


def guarded_like(shape, dtype):
    n = math.prod(shape)
    full, inner = g.guarded(n, dtype, float("nan"))
    return full, inner.view(*shape)


def strides(vals, t, x):
    vals[f"{t}_row_stride"], vals[f"{t}_head_stride"] = x.stride()[0], x.stride()[1]


def run(q, k, v, do, cu_q, cu_k, max_q, max_k, causal, det, tiling):
    """notes.varlen's launch sequence; returns outputs, gradients and their guard checks."""
    tq, h, d = q.shape
    tk, hk = k.shape[0], k.shape[1]
    batch = len(cu_q) - 1
    kd = next(x for x in g.HEAD_DIMS if x >= d)
    dtype = q.dtype
    cuq = torch.tensor(cu_q, dtype=torch.int32, device="cuda")
    cuk = torch.tensor(cu_k, dtype=torch.int32, device="cuda")
    o_full, o = guarded_like((tq, h, d), dtype)
    l_full, lse = guarded_like((h, tq), torch.float32)
    dq_full, dq = guarded_like((tq, h, d), dtype)
    dk_full, dk = guarded_like((tk, hk, d), dtype)
    dv_full, dv = guarded_like((tk, hk, d), dtype)
    D_full, D = guarded_like((h, tq), torch.float32)
    n_acc = h * 16 * math.ceil((tq + 16 * batch) / 16) * kd
    acc_full, acc = g.guarded(n_acc, torch.float32, float("nan"))
    scale = 1.0 / math.sqrt(d)
    vals = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(),
            "lse": lse.data_ptr(), "do": do.data_ptr(), "dvec": D.data_ptr(),
            "dq_accum": 0 if det else acc.data_ptr(), "dq": dq.data_ptr(), "dk": dk.data_ptr(),
            "dv": dv.data_ptr(), "cu_seqlens_q": cuq.data_ptr(), "cu_seqlens_k": cuk.data_ptr(),
            "total_q": tq, "total_k": tk, "head_dim": d, "heads": h, "heads_per_kv": h // hk,
            "scale_log2": scale * g.LOG2E, "softmax_scale": scale}
    for t, x in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dk),
                 ("dv", dv)):
        strides(vals, t, x)

    def go(name, rows, heads):
        blk = g.KERNELS[name]["tiles"]["block_n" if name.startswith("fa2_bwdvarlen") else "block_m"]
        g.launch(name, vals, [math.ceil(rows / blk), heads, batch])

    fwd = kernel("fwdvarlen", kd, dtype, causal)
    main = kernel("bwdvarlen", kd, dtype, causal, tiling)
    if max_q > 0:
        go(fwd, max_q, h)
        go(kernel("bwdprevarlen", kd, dtype, causal), max_q, h)
    if max_k > 0 and max_q > 0:
        go(main, max_k, hk)
    if max_q > 0:
        last = kernel("bwddqvarlen" if det else "bwdpostvarlen", kd, dtype, causal)
        go(last, max_q, h)
    torch.cuda.synchronize()
    guards = all(g.guards_ok(f, n) for f, n in (
        (o_full, o.numel()), (l_full, lse.numel()), (dq_full, dq.numel()), (dk_full, dk.numel()),
        (dv_full, dv.numel()), (D_full, D.numel()), (acc_full, n_acc)))
    return o, lse, dq, dk, dv, guards, main


def reference(q, k, v, do, cu_q, cu_k, causal):
    """Per sequence, float64 autograd: o, lse [h, total_q], dq, dk, dv."""
    tq, h, d = q.shape
    hk = k.shape[1]
    qd, kd, vd = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    o = torch.zeros(tq, h, d, dtype=torch.float64, device="cuda")
    lse = torch.full((h, tq), float("-inf"), dtype=torch.float64, device="cuda")
    outs = []
    for b in range(len(cu_q) - 1):
        (q0, q1), (k0, k1) = (cu_q[b], cu_q[b + 1]), (cu_k[b], cu_k[b + 1])
        sq, sk = q1 - q0, k1 - k0
        if sq == 0 or sk == 0:
            continue
        qh = qd[q0:q1].permute(1, 0, 2)
        kh = kd[k0:k1].permute(1, 0, 2).repeat_interleave(h // hk, 0)
        vh = vd[k0:k1].permute(1, 0, 2).repeat_interleave(h // hk, 0)
        s = (qh @ kh.transpose(-1, -2)) / math.sqrt(d)
        if causal:
            i = torch.arange(sq, device="cuda")[:, None]
            j = torch.arange(sk, device="cuda")[None, :]
            s = s.masked_fill(j > i + sk - sq, float("-inf"))
        l = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(l), torch.zeros_like(l), l)[..., None])
        ob = (p @ vh).permute(1, 0, 2)
        outs.append((ob, q0, q1))
        o[q0:q1] = ob.detach()
        lse[:, q0:q1] = l.detach()
    if outs:
        loss = sum((ob * do[q0:q1].double()).sum() for ob, q0, q1 in outs)
        loss.backward()
    grads = [x.grad if x.grad is not None else torch.zeros_like(x) for x in (qd, kd, vd)]
    return (o, lse, *grads)


def rel(a, b, floor):
    return ((a.double() - b.double()).norm() / max(b.double().norm().item(), floor)).item()


def case(lens, h, hk, d, dtype, causal, det):
    ok = True
    cu_q, cu_k = [0], [0]
    for lq, lk in lens:
        cu_q.append(cu_q[-1] + lq)
        cu_k.append(cu_k[-1] + lk)
    max_q, max_k = max(l[0] for l in lens), max(l[1] for l in lens)
    q, k, v = packed(cu_q[-1], h, d, dtype), packed(cu_k[-1], hk, d, dtype), packed(cu_k[-1], hk, d, dtype)
    do = packed(cu_q[-1], h, d, dtype)
    ro, rl, rq, rk, rv = reference(q, k, v, do, cu_q, cu_k, causal)
    kd = next(x for x in g.HEAD_DIMS if x >= d)
    for tiling in ("", "_wide"):
        name = kernel("bwdvarlen", kd, dtype, causal, tiling)
        if name not in g.KERNELS or not runs_here(name):
            continue
        o, lse, dq, dk, dv, guards, main = run(q, k, v, do, cu_q, cu_k, max_q, max_k, causal, det, tiling)
        tol = 3e-3 if dtype == torch.bfloat16 else 4e-4
        gtol = 2 * (3.5e-3 if dtype == torch.bfloat16 else 4.5e-4)
        floor = 1e-2 * max(rv.norm().item(), 1e-30)
        fin = torch.isfinite(rl)
        lse_err = (lse.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
        inf_ok = bool((lse[~fin] == float("-inf")).all().item()) if (~fin).any() else True
        zero_rows = bool((o[~fin.t()].abs().max() == 0).item()) if (~fin).any() else True
        errs = [rel(o, ro, 1e-30), rel(dq, rq, floor), rel(dk, rk, floor), rel(dv, rv, 1e-30)]
        nan = sum(int(torch.isnan(x).sum()) for x in (o, lse, dq, dk, dv))
        good = (nan == 0 and errs[0] <= tol and all(e <= gtol for e in errs[1:])
                and lse_err <= 1e-3 and inf_ok and zero_rows and guards)
        print(f"{'ok  ' if good else 'FAIL'} {main:44s} {'det' if det else 'atomic'} h{h}/{hk} d{d} "
              f"lens {lens[:4]}{'...' if len(lens) > 4 else ''}: o {errs[0]:.1e} dq {errs[1]:.1e} "
              f"dk {errs[2]:.1e} dv {errs[3]:.1e} lse {lse_err:.1e} nan {nan} guards {guards}",
              flush=True)
        ok &= good
    return ok


def garbage(h, hk, d, dtype, causal, det):
    """Offsets that are no batch at all: the call must run and keep to its buffers."""
    cu_q = [0, 60, -7, 2**31 - 1, 30, -2**31]
    cu_k = [5, -1, 1 << 30, 40, 2, 79]
    tq, tk = 100, 80
    q, k, v, do = packed(tq, h, d, dtype), packed(tk, hk, d, dtype), packed(tk, hk, d, dtype), packed(tq, h, d, dtype)
    ok = True
    kd = next(x for x in g.HEAD_DIMS if x >= d)
    for tiling in ("", "_wide"):
        name = kernel("bwdvarlen", kd, dtype, causal, tiling)
        if name not in g.KERNELS or not runs_here(name):
            continue
        *_, guards, main = run(q, k, v, do, cu_q, cu_k, 4096, 4096, causal, det, tiling)
        print(f"{'ok  ' if guards else 'FAIL'} {main:44s} garbage offsets: guards {guards}", flush=True)
        ok &= guards
    return ok


def main():
    torch.manual_seed(0)
    bf, f16 = torch.bfloat16, torch.float16
    mixed = [(0, 5), (1, 1), (37, 0), (0, 0), (300, 257), (64, 700), (129, 3)]
    uneven = [(1000, 1000), (15, 15), (64, 64), (333, 333), (1, 1)]
    ok = True
    if g.SUBSET:
        ok &= case(mixed, 8, 2, 64, bf, True, False)
        ok &= case(mixed, 4, 4, 128, f16, False, True)
        ok &= garbage(4, 4, 64, bf, True, False)
        ok &= garbage(4, 2, 128, f16, False, True)
    else:
        dims = [64, 128] if g.QUICK else [40, 64, 96, 128, 256]
        for i, d in enumerate(dims):
            for causal in (False, True):
                for j, lens in enumerate((mixed, uneven)):
                    h, hk = [(8, 2), (4, 4), (6, 1)][(i + j) % 3]
                    dt = bf if (i + j + causal) % 2 == 0 else f16
                    ok &= case(lens, h, hk, d, dt, causal, (i + j) % 2 == 1)
        ok &= garbage(4, 4, 64, bf, True, False)
        ok &= garbage(8, 2, 128, f16, False, True)
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
