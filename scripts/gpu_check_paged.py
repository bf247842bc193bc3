#!/usr/bin/env python3
"""GPU check of the paged KV-cache forward (fwdpaged, then fwdcombine) from the manifest
alone, with CuPy + PyTorch, against a float64 reference on the caches the page tables
describe.

Usage: python3 gpu_check_paged.py PTX_DIR [--quick | --subset]
Pools [num_pages, page_size, heads_k, d] (a view of a larger buffer: extra heads), tables
of permuted pages (never the identity), pages shared between sequences, entries past a
sequence's pages set to garbage; a run with every entry garbage (negative, past the pool)
checks the clamp: entry e reads page min(max(e, 0), num_pages - 1). Outputs and scratch
inside guard bands, o and lse NaN-poisoned. Exits non-zero on a failure.
"""
import math, sys
import torch
import gpu_check_kvcache as g

PAGES = [16, 32, 64, 128, 256]


def check_paged(b, sq, cap, h, hk, d, dtype, causal, lens, splits, page, garbage=False):
    ok = True
    for tiling in ("", "_long", "_prefill"):
        dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
        kd = next(x for x in g.HEAD_DIMS if x >= d)
        name = f"fa2_fwdpaged_d{kd}_{dt}{'_causal' if causal else ''}{tiling}_sm80"
        if name in g.KERNELS:
            ok &= check_on(name, kd, b, sq, cap, h, hk, d, dtype, causal, lens, splits, page, garbage)
    return ok


def check_on(name, kd, b, sq, cap, h, hk, d, dtype, causal, lens, splits, page, garbage):
    max_pages = max(1, math.ceil(cap / page))
    cap = max_pages * page  # the capacity the table spans
    num_pages = b * max_pages + 3
    # pools: views of buffers with 2 extra heads
    kbuf = torch.randn(num_pages, page, hk + 2, d, device="cuda", dtype=dtype)
    vbuf = torch.randn(num_pages, page, hk + 2, d, device="cuda", dtype=dtype)
    kp, vp = kbuf[:, :, 1:hk + 1], vbuf[:, :, 1:hk + 1]
    gen = torch.Generator().manual_seed(b * 1000 + page + d)
    if garbage:
        table = torch.randint(-2**31, 2**31 - 1, (b, max_pages), generator=gen, dtype=torch.int64)
        table[:, ::3] = torch.randint(-5, num_pages + 5, table[:, ::3].shape, generator=gen)
        table = table.to(torch.int32)
    else:
        perm = torch.randperm(num_pages, generator=gen)
        while bool((perm[:b * max_pages] == torch.arange(b * max_pages)).all()):
            perm = torch.randperm(num_pages, generator=gen)
        table = perm[:b * max_pages].view(b, max_pages).to(torch.int32)
        if b > 1 and max_pages > 1:
            table[1, 0] = table[0, max_pages - 1]  # a page two sequences share
        for bi, n in enumerate(lens):  # entries past a sequence's pages: garbage
            used = math.ceil(min(max(n, 0), cap) / page)
            table[bi, used:] = torch.randint(-2**31, 2**31 - 1, (max_pages - used,), generator=gen,
                                             dtype=torch.int64).to(torch.int32)
    pages_read = table.to(torch.int64).clamp(0, num_pages - 1).cuda()
    kc = kp[pages_read].reshape(b, cap, hk, d)  # the caches the tables describe
    vc = vp[pages_read].reshape(b, cap, hk, d)
    table_d = table.cuda()
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    clamped = [min(max(x, 0), cap) for x in lens]
    n_o, n_l = b * sq * h * d, b * h * sq
    o_full, o = g.guarded(n_o, dtype, float("nan"))
    l_full, lse = g.guarded(n_l, torch.float32, float("nan"))
    o, lse = o.view(b, sq, h, d), lse.view(b, h, sq)
    n_oa, n_la = splits * b * h * sq * kd, splits * b * h * sq
    oa_full, oa = g.guarded(n_oa, torch.float32, float("nan"))
    la_full, la = g.guarded(n_la, torch.float32, float("nan"))
    scale = 1.0 / math.sqrt(d)
    vals = {"q": q.data_ptr(), "k": kp.data_ptr(), "v": vp.data_ptr(), "o": o.data_ptr(),
            "lse": lse.data_ptr(), "o_accum": oa.data_ptr() if splits > 1 else 0,
            "lse_accum": la.data_ptr() if splits > 1 else 0, "seqlens_k": lens_t.data_ptr(),
            "seqlen_q": sq, "seqlen_k": cap, "head_dim": d, "heads": h, "heads_per_kv": h // hk,
            "scale_log2": scale * g.LOG2E, "num_splits": splits, "block_table": table_d.data_ptr(),
            "max_pages": max_pages, "page_shift": page.bit_length() - 1, "num_pages": num_pages}
    for t, x in (("q", q), ("k", kp), ("v", vp), ("o", o)):
        st = x.stride()
        vals.update({f"{t}_batch_stride": st[0], f"{t}_row_stride": st[1], f"{t}_head_stride": st[2]})
    bm = g.KERNELS[name]["tiles"]["block_m"]
    g.launch(name, vals, [math.ceil(sq * (h // hk) / bm), hk, b * splits])
    if splits > 1:
        comb = g.KERNELS[g.kl.combine_name(kd, {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype], splits)]
        g.launch(comb["name"], vals, [math.ceil(h * sq / comb["tiles"]["block_m"]), b, 1])
    torch.cuda.synchronize()
    o_ref, lse_ref = g.reference(q, kc, vc, clamped, causal, scale)
    nan = torch.isnan(o).sum().item() + torch.isnan(lse).sum().item()
    err = ((o.double() - o_ref).norm() / o_ref.norm().clamp_min(1e-30)).item()
    err = 0.0 if o_ref.norm().item() == 0 and o.double().abs().max().item() == 0 else err
    fin = torch.isfinite(lse_ref)
    lse_err = (lse.double()[fin] - lse_ref[fin]).abs().max().item() if fin.any() else 0.0
    inf_ok = bool((lse[~fin] == float("-inf")).all().item()) if (~fin).any() else True
    guards = all(g.guards_ok(f, n) for f, n in ((o_full, n_o), (l_full, n_l), (oa_full, n_oa), (la_full, n_la)))
    tol = 3e-3 if dtype == torch.bfloat16 else 4e-4
    ok = nan == 0 and err <= tol and lse_err <= 1e-3 and inf_ok and guards
    print(f"{'ok  ' if ok else 'FAIL'} {name:40s} page{page} b{b} sq{sq} cap{cap} h{h}/{hk} d{d} "
          f"splits{splits}{' garbage' if garbage else ''} lens {lens[:4]}: rel {err:.1e} "
          f"lse {lse_err:.1e} nan {nan} inf {inf_ok} guards {guards}", flush=True)
    return ok


def main():
    torch.manual_seed(0)
    ok = True
    bf, f16 = torch.bfloat16, torch.float16
    if g.SUBSET:
        for page in (16, 256):
            ok &= check_paged(3, 1, 700, 8, 2, 128, bf, True, [700, 1, 333], 3, page)
            ok &= check_paged(2, 40, 300, 8, 2, 128, f16, False, [300, 7], 2, page)
            ok &= check_paged(2, 1, 500, 8, 1, 64, bf, False, [500, 499], 5, page, garbage=True)
    else:
        dims = [64, 128] if g.QUICK else [40, 64, 128, 256]
        for page in PAGES:
            for d in dims:
                for causal in (False, True):
                    dt = bf if (page + d + causal) % 2 == 0 else f16
                    ok &= check_paged(4, 1, 1000, 32, 8, d, dt, causal, [0, 1, 517, 1000], 3, page)
                    ok &= check_paged(2, 4, 777, 8, 1, d, dt, causal, [777, 5], 16, page)
                    ok &= check_paged(2, 129, 1500, 8, 2, d, dt, causal, [1500, 200], 2, page)
            ok &= check_paged(2, 1, 900, 8, 2, 128, bf, False, [900, 900], 1, page, garbage=True)
            ok &= check_paged(3, 1, 2048, 8, 1, 64, f16, True, [2048, -3, 2**31 - 1], 40, page)
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
