#!/usr/bin/env python3
"""GPU check of the KV-cache forward (fwdsplit, then fwdcombine) from the manifest alone,
with CuPy + PyTorch, against a float64 reference.

Usage: python3 gpu_check_kvcache.py PTX_DIR [--quick]
PTX_DIR is what `flash-codegen emit --all --out-dir PTX_DIR` wrote. Every output (o, lse)
and scratch buffer (o_accum, lse_accum) sits inside a guard band of a sentinel value that
must survive; o and lse start as NaN. Prints one line per case; exits non-zero on a failure.
"""
import json, math, os, sys
import warnings; warnings.filterwarnings("ignore", category=DeprecationWarning)
import numpy as np
import cupy as cp
import torch

PTX_DIR = sys.argv[1]
QUICK = "--quick" in sys.argv
SUBSET = "--subset" in sys.argv  # a few cases, for compute-sanitizer
LOG2E = 1.4426950408889634
HEAD_DIMS = [32, 64, 96, 128, 160, 192, 224, 256]
GUARD = 4096  # elements of guard band on each side
SENTINEL = 12345.0
MAN = json.load(open(os.path.join(PTX_DIR, "manifest.json")))
assert MAN["format"] in (2, 3)  # 3 only added the sm90a section
KERNELS = {k["name"]: k for k in MAN["kernels"]}
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvcache_launch as kl  # the manifest's rules, as a CuPy user follows them
kl.load(PTX_DIR)
_fns = {}
NP = {"uint64": np.uint64, "uint32": np.uint32, "float32": np.float32}


def fn(name):
    if name not in _fns:
        k = KERNELS[name]
        f = cp.RawModule(path=os.path.join(PTX_DIR, k["file"])).get_function(name)
        if k["launch"]["needs_smem_opt_in"]:
            f.max_dynamic_shared_size_bytes = k["launch"]["dynamic_smem_bytes"]
        _fns[name] = f
    return _fns[name]


def guarded(n, dtype, fill):
    """A flat buffer of n elements inside guard bands: (full buffer, view of the n)."""
    full = torch.full((n + 2 * GUARD,), SENTINEL, device="cuda", dtype=dtype)
    inner = full[GUARD:GUARD + n]
    inner.fill_(fill)
    return full, inner


def guards_ok(full, n):
    g = torch.cat([full[:GUARD], full[GUARD + n:]])
    return bool((g == SENTINEL).all().item())


def launch(name, vals, grid):
    k = KERNELS[name]
    args = tuple(NP[p["numpy"]](vals[p["name"]]) for p in k["params"])
    with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        fn(name)(tuple(grid), tuple(k["launch"]["block"]), args,
                 shared_mem=k["launch"]["dynamic_smem_bytes"])


def reference(q, kc, vc, lens, causal, scale):
    b, sq, h, d = q.shape
    hk = kc.shape[2]
    o = torch.zeros(b, sq, h, d, dtype=torch.float64, device="cuda")
    lse = torch.full((b, h, sq), float("-inf"), dtype=torch.float64, device="cuda")
    for bi in range(b):
        L = lens[bi]
        if L == 0:
            continue
        qd = q[bi].double().permute(1, 0, 2)                     # [h, sq, d]
        kd = kc[bi, :L].double().permute(1, 0, 2).repeat_interleave(h // hk, 0)
        vd = vc[bi, :L].double().permute(1, 0, 2).repeat_interleave(h // hk, 0)
        s = (qd @ kd.transpose(-1, -2)) * scale                  # [h, sq, L]
        if causal:
            i = torch.arange(sq, device="cuda")[:, None]
            j = torch.arange(L, device="cuda")[None, :]
            s = s.masked_fill(j > i + L - sq, float("-inf"))
        l = torch.logsumexp(s, -1)
        p = torch.nan_to_num(torch.exp(s - l[..., None]), nan=0.0)
        o[bi] = (p @ vd).permute(1, 0, 2)
        lse[bi] = l
    return o, lse


def check(b, sq, cap, h, hk, d, dtype, causal, lens, splits, with_lens=True, big_cache=False):
    """Every tiling of the split pass (the key-split one the runtime picks up to 16
    packed rows, the 64-row one from 17, the prefill one from 128 where the head dim has
    one) and each of the combine's three (a row per warp up to 8 splits, 4 warps a row to
    32, 8 from 33: the runtime's pick, the next one with the 64-row pass): each computes
    any problem."""
    return all([check_on(t, b, sq, cap, h, hk, d, dtype, causal, lens, splits, with_lens, big_cache)
                for t in ("", "_long", "_prefill") if has_split(d, dtype, causal, t)])


def has_split(d, dtype, causal, tiling):
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    kd = next(x for x in HEAD_DIMS if x >= d)
    return f"fa2_fwdsplit_d{kd}_{dt}{'_causal' if causal else ''}{tiling}_sm80" in KERNELS


def check_on(tiling, b, sq, cap, h, hk, d, dtype, causal, lens, splits, with_lens=True, big_cache=False):
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    kd = next(x for x in HEAD_DIMS if x >= d)
    split = f"fa2_fwdsplit_d{kd}_{dt}{'_causal' if causal else ''}{tiling}_sm80"
    # the combine the rule picks (kvcache_launch.combine_name), the next of the three
    # with the 64-row split pass
    combs = [f"fa2_fwdcombine_d{kd}_{dt}{t}_sm80" for t in ("_prefill", "", "_long")]
    i = combs.index(kl.combine_name(kd, dt, splits))
    comb = combs[(i + 1) % 3] if tiling == "_long" else combs[i]
    bm = KERNELS[split]["tiles"]["block_m"]
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    # the caches: views of a larger buffer (capacity + 7 rows, 3 extra heads) when big_cache
    rows, heads = (cap + 7, hk + 3) if big_cache else (cap, hk)
    kbuf = torch.randn(b, max(rows, 1), heads, d, device="cuda", dtype=dtype)
    vbuf = torch.randn(b, max(rows, 1), heads, d, device="cuda", dtype=dtype)
    kc, vc = kbuf[:, :cap, :hk], vbuf[:, :cap, :hk]
    if not with_lens:
        lens = [cap] * b
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    clamped = [min(max(x, 0), cap) for x in lens]
    n_o, n_l = b * sq * h * d, b * h * sq
    o_full, o = guarded(n_o, dtype, float("nan"))
    l_full, lse = guarded(n_l, torch.float32, float("nan"))
    o, lse = o.view(b, sq, h, d), lse.view(b, h, sq)
    n_oa, n_la = splits * b * h * sq * kd, splits * b * h * sq
    oa_full, oa = guarded(n_oa, torch.float32, float("nan"))
    la_full, la = guarded(n_la, torch.float32, float("nan"))
    scale = 1.0 / math.sqrt(d)
    vals = {"q": q.data_ptr(), "k": kc.data_ptr(), "v": vc.data_ptr(), "o": o.data_ptr(),
            "lse": lse.data_ptr(), "o_accum": oa.data_ptr() if splits > 1 else 0,
            "lse_accum": la.data_ptr() if splits > 1 else 0,
            "seqlens_k": lens_t.data_ptr() if with_lens else 0, "seqlen_q": sq, "seqlen_k": cap,
            "head_dim": d, "heads": h, "heads_per_kv": h // hk, "scale_log2": scale * LOG2E,
            "num_splits": splits}
    for t, x in (("q", q), ("k", kc), ("v", vc), ("o", o)):
        st = x.stride()
        vals.update({f"{t}_batch_stride": st[0], f"{t}_row_stride": st[1], f"{t}_head_stride": st[2]})
    hpk = h // hk
    launch(split, vals, [math.ceil(sq * hpk / bm), hk, b * splits])
    if splits > 1:
        cbm = KERNELS[comb]["tiles"]["block_m"]
        launch(comb, vals, [math.ceil(h * sq / cbm), b, 1])
    torch.cuda.synchronize()
    o_ref, lse_ref = reference(q, kc, vc, clamped, causal, scale)
    nan_o = torch.isnan(o).sum().item()
    nan_l = torch.isnan(lse).sum().item()
    err = ((o.double() - o_ref).norm() / o_ref.norm().clamp_min(1e-30)).item()
    err = 0.0 if o_ref.norm().item() == 0 and o.double().abs().max().item() == 0 else err
    fin = torch.isfinite(lse_ref)
    lse_err = (lse.double()[fin] - lse_ref[fin]).abs().max().item() if fin.any() else 0.0
    inf_ok = bool((lse[~fin] == float("-inf")).all().item()) if (~fin).any() else True
    zero_ok = bool((o.double()[~fin.permute(0, 2, 1)] == 0).all().item()) if (~fin).any() else True
    guards = all(guards_ok(f, n) for f, n in ((o_full, n_o), (l_full, n_l), (oa_full, n_oa), (la_full, n_la)))
    tol = 3e-3 if dtype == torch.bfloat16 else 4e-4
    ok = nan_o == 0 and nan_l == 0 and err <= tol and lse_err <= 1e-3 and inf_ok and zero_ok and guards
    print(f"{'ok  ' if ok else 'FAIL'} {split:36s} b{b} sq{sq} cap{cap} h{h}/{hk} d{d} splits{splits} "
          f"lens {lens if len(lens) <= 4 else str(lens[:4]) + '...'}{'' if with_lens else ' (none)'}"
          f"{' view' if big_cache else ''}: rel {err:.1e} lse {lse_err:.1e} nan {nan_o}/{nan_l} "
          f"inf {inf_ok} zero {zero_ok} guards {guards}", flush=True)
    return ok


def main():
    torch.manual_seed(0)
    ok = True
    dims = [64, 128] if QUICK else HEAD_DIMS + [40, 72, 200]
    if SUBSET:
        for causal in (False, True):
            for d in (40, 128, 256):
                ok &= check(4, 1, 300, 32, 8, d, torch.bfloat16, causal, [0, 1, 117, 300], 3, big_cache=True)
                ok &= check(2, 4, 177, 8, 1, d, torch.float16, causal, [177, 5], 2)
            ok &= check(2, 40, 200, 4, 2, 64, torch.bfloat16, causal, [200, -5], 1)
            # the prefill split row (160 packed rows: a partial second tile), and 40 splits
            # (the 8-warp combine; the row-per-warp one on the 64-row pass)
            ok &= check(2, 40, 300, 8, 2, 128, torch.bfloat16, causal, [300, 7], 3)
            ok &= check(1, 1, 4096, 8, 1, 128, torch.float16, causal, [4000], 40)
        print("ALL OK" if ok else "SOME FAILED")
        sys.exit(0 if ok else 1)
    for dtype in (torch.bfloat16, torch.float16):
        for causal in (False, True):
            for d in dims:
                # decode (1 query), GQA 32/8; lengths 0, 1, odd, full; several split counts
                for splits in (1, 3, 16):
                    ok &= check(4, 1, 1000, 32, 8, d, dtype, causal, [0, 1, 517, 1000], splits, big_cache=True)
                ok &= check(2, 4, 777, 8, 1, d, dtype, causal, [777, 5], 5)      # MQA, speculative
                ok &= check(2, 16, 333, 4, 4, d, dtype, causal, [333, 20], 2)    # MHA, sq > some lengths
            # chunked prefill, per-sequence lengths, no seqlens_k, many splits, huge values
            ok &= check(2, 300, 2048, 8, 2, 128, dtype, causal, [2048, 1500], 4)
            ok &= check(1, 129, 4096, 8, 8, 64, dtype, causal, [4096], 1, with_lens=False)
            ok &= check(3, 1, 300, 16, 2, 128, dtype, causal, [300, -5, 2**31 - 1], 7)
            ok &= check(2, 7, 64, 4, 2, 256, dtype, causal, [64, 63], 40)         # splits > blocks
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
