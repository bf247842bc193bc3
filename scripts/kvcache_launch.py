"""The KV-cache forward (fwdsplit, then fwdcombine) launched from manifest.json with
CuPy, as a user without Rust would: the manifest's kv_cache notes followed line by line,
the split rule included. Used by bench_kvcache.py (--ours)."""
import json, math, os
import numpy as np
import cupy as cp
import torch

LOG2E = 1.4426950408889634
HEAD_DIMS = [32, 64, 96, 128, 160, 192, 224, 256]
NP = {"uint64": np.uint64, "uint32": np.uint32, "float32": np.float32}
KERNELS, FNS, DIR = {}, {}, [None]


def load(ptx_dir):
    man = json.load(open(os.path.join(ptx_dir, "manifest.json")))
    assert man["format"] in (2, 3)  # 3 only added the sm90a section
    KERNELS.update({k["name"]: k for k in man["kernels"]})
    DIR[0] = ptx_dir


def fn(name):
    if name not in FNS:
        k = KERNELS[name]
        f = cp.RawModule(path=os.path.join(DIR[0], k["file"])).get_function(name)
        if k["launch"]["needs_smem_opt_in"]:
            f.max_dynamic_shared_size_bytes = k["launch"]["dynamic_smem_bytes"]
        FNS[name] = f
    return FNS[name]


def num_splits(kern, b, sq, h, hk, cap, d, causal, sms):
    """The manifest's split rule (notes.kv_cache)."""
    t = kern["tiles"]
    slots = slots_of(kern, sms)
    m_blocks = math.ceil(sq * (h // hk) / t["block_m"])
    total = m_blocks * hk * b
    n = math.ceil(cap / t["block_n"])
    if total >= 0.8 * slots:
        kv_head = cap * d * 4
        if kv_head > 50 * 2**20 and m_blocks >= 2 * slots and not causal:
            return min(math.ceil(kv_head / (50 * 2**20)), 128)
        return 1
    if n <= 4 or (total >= 0.45 * slots and cap * d * 4 < 4 * 2**20):
        return 1
    mx = min(64, slots, n // 2)
    if total * mx <= slots:
        return mx
    eff = [(total * s / slots) / math.ceil(total * s / slots) for s in range(1, mx + 1)]
    best = max(eff)
    return next(s for s in range(1, mx + 1) if eff[s - 1] >= 0.95 * best)


def slots_of(kern, sms):
    t = kern["tiles"]
    return sms * max(1, min(228 * 1024 // (kern["launch"]["dynamic_smem_bytes"] + 1024),
                            65536 // (32 * t["warps"] * 256)))


def split_tiling(base, b, sq, h, hk, cap, sms):
    """The manifest's kernel choice: the key-split tiling up to 16 packed rows
    (seqlen_q * heads_per_kv), the long one from its min_seqlen_q (17), the prefill one
    from its min_seqlen_q where the head dim has one and its CTAs x min(64, n / 2) reach
    the slots; the compact one where the GPU allows less shared memory per block (not here)."""
    rows = sq * (h // hk)
    pre = KERNELS.get(f"{base}_prefill_sm80")
    if pre and rows >= pre["min_seqlen_q"]:
        t = pre["tiles"]
        total = math.ceil(rows / t["block_m"]) * hk * b
        if total * max(1, min(64, math.ceil(cap / t["block_n"]) // 2)) >= slots_of(pre, sms):
            return "_prefill"
    return "_long" if rows >= KERNELS[f"{base}_long_sm80"]["min_seqlen_q"] else ""


def combine_name(kd, dt, s):
    """The manifest's combine choice: prefill (a row per warp) up to 8 splits, standard
    from 9 to 32, long from its min_seqlen_q (33)."""
    long = f"fa2_fwdcombine_d{kd}_{dt}_long_sm80"
    if s >= KERNELS[long]["min_seqlen_q"]:
        return long
    return f"fa2_fwdcombine_d{kd}_{dt}{'_prefill' if s <= 8 else ''}_sm80"


class Call:
    def __init__(self, launches, splits, keep):
        self.launches, self.splits, self.keep = launches, splits, keep

    def __call__(self):
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            for f, grid, block, args, smem in self.launches:
                f(grid, block, args, shared_mem=smem)


def prepare(q, k, v, causal, seqlens=None, splits=None, o=None, lse=None, tiling=None):
    """q [b, sq, h, d], k/v caches [b, cap, hk, d] (views allowed); returns a callable.
    `tiling` (tuning aid): "", "_compact", "_long" or "_prefill" instead of the rule below."""
    b, sq, h, d = q.shape
    cap, hk = k.shape[1], k.shape[2]
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[q.dtype]
    kd = next(x for x in HEAD_DIMS if x >= d)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = f"fa2_fwdsplit_d{kd}_{dt}{'_causal' if causal else ''}"
    if tiling is None:
        tiling = split_tiling(base, b, sq, h, hk, cap, sms)
    split = KERNELS[f"{base}{tiling}_sm80"]
    s = splits or num_splits(split, b, sq, h, hk, cap, d, causal, sms)
    comb = KERNELS[combine_name(kd, dt, s)]
    o = o if o is not None else torch.empty_like(q)
    lse = lse if lse is not None else torch.empty(b, h, sq, device=q.device, dtype=torch.float32)
    oa = torch.empty(s * b * h * sq * kd if s > 1 else 1, device=q.device, dtype=torch.float32)
    la = torch.empty(s * b * h * sq if s > 1 else 1, device=q.device, dtype=torch.float32)
    vals = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(), "lse": lse.data_ptr(),
            "o_accum": oa.data_ptr() if s > 1 else 0, "lse_accum": la.data_ptr() if s > 1 else 0,
            "seqlens_k": seqlens.data_ptr() if seqlens is not None else 0, "seqlen_q": sq, "seqlen_k": cap,
            "head_dim": d, "heads": h, "heads_per_kv": h // hk, "scale_log2": LOG2E / math.sqrt(d),
            "num_splits": s}
    for t, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        st = x.stride()
        vals.update({f"{t}_batch_stride": st[0], f"{t}_row_stride": st[1], f"{t}_head_stride": st[2]})
    launches = []
    for kern, grid in ((split, (math.ceil(sq * (h // hk) / split["tiles"]["block_m"]), hk, b * s)),
                       (comb, (math.ceil(h * sq / comb["tiles"]["block_m"]), b, 1))):
        if kern is comb and s == 1:
            break
        args = tuple(NP[p["numpy"]](vals[p["name"]]) for p in kern["params"])
        launches.append((fn(kern["name"]), grid, tuple(kern["launch"]["block"]), args,
                         kern["launch"]["dynamic_smem_bytes"]))
    return Call(launches, s, (o, lse, oa, la, q, k, v, seqlens))


def prepare_dense(q, k, v, causal):
    """The dense forward (fa2_fwd) on the same problem, for the chunked-prefill bar."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[q.dtype]
    kd = next(x for x in HEAD_DIMS if x >= d)
    kern = KERNELS[f"fa2_fwd_d{kd}_{dt}{'_causal' if causal else ''}_sm80"]
    o = torch.empty_like(q)
    lse = torch.empty(b, h, sq, device=q.device, dtype=torch.float32)
    vals = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(), "lse": lse.data_ptr(),
            "seqlen_q": sq, "seqlen_k": sk, "head_dim": d, "heads": h, "heads_per_kv": h // hk,
            "scale_log2": LOG2E / math.sqrt(d)}
    for t, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        st = x.stride()
        vals.update({f"{t}_batch_stride": st[0], f"{t}_row_stride": st[1], f"{t}_head_stride": st[2]})
    args = tuple(NP[p["numpy"]](vals[p["name"]]) for p in kern["params"])
    grid = (math.ceil(sq / kern["tiles"]["block_m"]), h, b)
    return Call([(fn(kern["name"]), grid, tuple(kern["launch"]["block"]), args,
                  kern["launch"]["dynamic_smem_bytes"])], 1, (o, lse, q, k, v))
