#!/usr/bin/env python3
import warnings; warnings.filterwarnings("ignore", category=DeprecationWarning)
"""Quick GPU check of generated forward PTX with CuPy + PyTorch (float64 reference on GPU).

Usage: python3 gpu_check_fwd.py PTX_DIR [--quick]
PTX_DIR holds `<kernel>.ptx` files (as written by `flash-codegen emit --all`) and,
optionally, `probe_mma_{f16,bf16}.ptx`. Prints one line per case and a summary;
exits non-zero when any case fails.
"""
import json, math, os, sys
import numpy as np
import cupy as cp
import torch

PTX_DIR = sys.argv[1]
QUICK = "--quick" in sys.argv
LOG2E = 1.4426950408889634
HEAD_DIMS = [32, 64, 96, 128, 160, 192, 224, 256]
TILES = {}  # kernel head dim -> (block_m, threads, smem) filled from the PTX / rule below
_mods = {}


def kernel(name):
    if name not in _mods:
        mod = cp.RawModule(path=os.path.join(PTX_DIR, name + ".ptx"))
        _mods[name] = mod.get_function(name)
    return _mods[name]


_manifest = None


def manifest_entry(name):
    """The kernel's manifest.json entry, or None without a manifest."""
    global _manifest
    path = os.path.join(PTX_DIR, "manifest.json")
    if _manifest is None and os.path.exists(path):
        man = json.load(open(path))
        assert man.get("format") in (2, 3), f"manifest.json format {man.get('format')}, expected 2 or 3"
        _manifest = {k["name"]: k for k in man["kernels"]}
    return (_manifest or {}).get(name)


def geometry(name):
    """(block_m, threads, smem bytes) from manifest.json when present, else the PTX header comment."""
    k = manifest_entry(name)
    if k is not None:
        return k["tiles"]["block_m"], k["launch"]["block"][0], k["launch"]["dynamic_smem_bytes"]
    import re
    text = open(os.path.join(PTX_DIR, name + ".ptx")).read()
    m = re.search(r"block (\d+)x(\d+), (\d+) warps, (\d+) stages, d (\d+), smem (\d+) bytes", text)
    return int(m.group(1)), 32 * int(m.group(3)), int(m.group(6))


def reference(q, k, v, causal, scale):
    # q [b, sq, h, d], k/v [b, sk, hk, d]; float64
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qd, kd, vd = (x.double().permute(0, 2, 1, 3) for x in (q, k, v))
    kd = kd.repeat_interleave(h // hk, dim=1)
    vd = vd.repeat_interleave(h // hk, dim=1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [b, h, sq]; -inf for fully masked rows
    p = torch.exp(s - lse[..., None])
    p = torch.nan_to_num(p, nan=0.0)
    o = (p @ vd).permute(0, 2, 1, 3)
    return o, lse


def run_fwd(q, k, v, o, lse, causal, scale=None, tiling=""):
    """Launch the forward kernel of the problem (`tiling`: "" or "_compact")."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kd = next(x for x in HEAD_DIMS if x >= d)
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[q.dtype]
    name = f"fa2_fwd_d{kd}_{dt}{'_causal' if causal else ''}{tiling}_sm80"
    f = kernel(name)
    bm, threads, smem = geometry(name)
    f.max_dynamic_shared_size_bytes = smem
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    vals = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(),
            "lse": lse.data_ptr() if lse is not None else 0, "seqlen_q": sq, "seqlen_k": sk,
            "head_dim": d, "heads": h, "heads_per_kv": h // hk, "scale_log2": scale * LOG2E}
    for t, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        st = x.stride()
        vals.update({f"{t}_batch_stride": st[0], f"{t}_row_stride": st[1], f"{t}_head_stride": st[2]})
    np_ty = {"u64": np.uint64, "u32": np.uint32, "f32": np.float32}
    entry = manifest_entry(name)
    if entry is not None:  # parameter order and types from the manifest alone
        args = [np_ty[p["type"]](vals[p["name"]]) for p in entry["params"]]
    else:
        order = ["q", "k", "v", "o", "lse", "seqlen_q", "seqlen_k", "head_dim", "heads", "heads_per_kv",
                 "scale_log2"] + [f"{t}_{s}" for t in "qkvo" for s in ("batch_stride", "row_stride", "head_stride")]
        types = ["u64"] * 5 + ["u32"] * 5 + ["f32"] + ["u64", "u32", "u32"] * 4
        args = [np_ty[ty](vals[n]) for n, ty in zip(order, types)]
    grid = ((sq + bm - 1) // bm, h, b)
    with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        f(grid, (threads, 1, 1), tuple(args), shared_mem=smem)
    return name


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def check_case(b, sq, sk, h, hk, d, dtype, causal, packed=False, tiling=""):
    dev = "cuda"
    if packed:  # q, k, v sliced out of one [b, s, 3, h, d] buffer (sq == sk, h == hk)
        qkv = torch.randn(b, sq, 3, h, d, device=dev, dtype=dtype)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q = torch.randn(b, sq, h, d, device=dev, dtype=dtype)
        k = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
        v = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
    o = torch.full((b, sq, h, d), float("nan"), device=dev, dtype=dtype)
    lse = torch.full((b, h, sq), float("nan"), device=dev, dtype=torch.float32)
    name = run_fwd(q, k, v, o, lse, causal, tiling=tiling)
    torch.cuda.synchronize()
    o_ref, lse_ref = reference(q, k, v, causal, 1.0 / math.sqrt(d))
    nan_o = torch.isnan(o).sum().item()
    nan_l = torch.isnan(lse).sum().item()
    err = rel(o, o_ref)
    fin = torch.isfinite(lse_ref)
    lse_err = (lse.double()[fin] - lse_ref[fin]).abs().max().item() if fin.any() else 0.0
    inf_ok = bool((lse[~fin] == float("-inf")).all().item()) if (~fin).any() else True
    tol = 3e-3 if dtype == torch.bfloat16 else 4e-4
    ok = nan_o == 0 and nan_l == 0 and err <= tol and lse_err <= 1e-3 and inf_ok
    print(f"{'ok  ' if ok else 'FAIL'} {name:34s} b{b} sq{sq} sk{sk} h{h}/{hk} d{d}{' packed' if packed else ''}: "
          f"rel_l2 {err:.2e} lse {lse_err:.1e} nan {nan_o}/{nan_l} inf_ok {inf_ok}", flush=True)
    return ok


def check_probe():
    ok = True
    for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        path = os.path.join(PTX_DIR, f"probe_mma_{dt}.ptx")
        if not os.path.exists(path):
            continue
        f = cp.RawModule(path=path).get_function(f"probe_mma_{dt}")
        a, bt, v = (torch.randn(16, 16, device="cuda", dtype=tdt) for _ in range(3))
        c1 = torch.full((16, 16), float("nan"), device="cuda")
        c2 = torch.full((16, 16), float("nan"), device="cuda")
        f((1,), (32,), tuple(np.uint64(x.data_ptr()) for x in (a, bt, v, c1, c2)), shared_mem=3 * 16 * 128)
        torch.cuda.synchronize()
        e1 = rel(c1, a.double() @ bt.double().T)
        e2 = rel(c2, a.double() @ v.double())
        good = e1 < 1e-5 and e2 < 1e-5
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} probe_mma_{dt}: c1 = a bt^T rel {e1:.1e}, c2 = a v rel {e2:.1e}")
    return ok


def main():
    torch.manual_seed(0)
    ok = check_probe()
    dims = HEAD_DIMS + [40, 72, 200, 240]
    lens = [(1, 1), (17, 17), (128, 128), (1000, 1000), (2061, 2061), (128, 1000), (1000, 128), (17, 2061), (2061, 17)]
    if QUICK:
        dims, lens = [64, 128], [(17, 17), (1000, 1000), (128, 1000), (1000, 128)]
    for dtype in (torch.float16, torch.bfloat16):
        for causal in (False, True):
            for d in dims:
                for sq, sk in lens:
                    if sq * sk > 1000 * 1000 and d not in (64, 128):
                        continue
                    ok &= check_case(1, sq, sk, 2, 2, d, dtype, causal)
            ok &= check_case(2, 300, 300, 8, 2, 128, dtype, causal)       # GQA 8/2, batch 2
            ok &= check_case(2, 257, 513, 8, 1, 64, dtype, causal)        # MQA
            ok &= check_case(3, 333, 333, 4, 4, 96, dtype, causal, packed=True)
            # the compact kernels (GPUs with 99 KiB of shared memory per block) where the
            # manifest has them: d256, and d240 on it
            if manifest_entry(f"fa2_fwd_d256_{'bf16' if dtype == torch.bfloat16 else 'f16'}_compact_sm80"):
                for d, (sq, sk) in ((256, (1000, 1000)), (256, (17, 2061)), (240, (2061, 17))):
                    ok &= check_case(1, sq, sk, 2, 2, d, dtype, causal, tiling="_compact")
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
