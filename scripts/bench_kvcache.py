#!/usr/bin/env python3
"""Decode / KV-cache bench of the peers and the ceiling, side by side (H200).

Usage: python3 bench_kvcache.py PTX_DIR OUT.json [--quick] [--ours]

Per row (batch, cache tokens, query rows, heads/heads_k, head dim): the median time of
- `sdpa_flash`: torch SDPA on the flash backend, enable_gqa (FlashAttention-2);
- `cudnn`: torch SDPA on the cuDNN backend, enable_gqa;
- `read`: a read-only pass over the same number of bytes as the K/V cache (a sum of a
  bf16 tensor), the ceiling;
- with --ours, `ours_kernels`: fwdsplit + fwdcombine launched from the manifest with CuPy
  (the runtime's split rule, re-implemented here; the Rust bench times the public call).
CUDA events, 3 warm-ups, L2 flushed (256 MB write) before every timed call, the GPU
held by a sleep kernel while the host enqueues the call (GPU time only), median of `reps`. KV bytes = cache tokens x heads_k x d x 2 (K and V) x 2 bytes; every sequence is
full (SDPA takes no per-sequence lengths). Causal is off for decode rows (one query sees
the whole cache either way); chunked prefill rows are non-causal too (as the bar asks).
"""
import json, math, os, sys
import warnings; warnings.filterwarnings("ignore")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PTX_DIR, OUT = sys.argv[1], sys.argv[2]
QUICK, OURS = "--quick" in sys.argv, "--ours" in sys.argv
DT = torch.bfloat16
FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def rows():
    out = []
    batches, caches, qs = ([1, 64], [4096, 32768], [1, 16]) if QUICK else ([1, 8, 64], [4096, 32768, 131072], [1, 4, 16])
    for d in (128, 64):
        for h, hk in ((32, 8), (8, 1)):
            for b in batches:
                for L in caches:
                    if b * L * hk * d * 4 > 40e9:
                        continue
                    for sq in qs:
                        out.append(dict(kind="decode", b=b, L=L, sq=sq, h=h, hk=hk, d=d))
    for L in ([8192, 32768] if QUICK else [8192, 16384, 32768, 65536, 131072]):
        out.append(dict(kind="prefill", b=1, L=L, sq=512, h=8, hk=8, d=128))
    return out


def timed(f, reps):
    for _ in range(3):
        f()
    ts = []
    for _ in range(reps):
        FLUSH.zero_()
        # the GPU sleeps while the host enqueues the call, so host launch gaps (Python,
        # CuPy, two kernels) do not count: GPU time only, for every method alike
        torch.cuda._sleep(200_000)
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        z.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(z) * 1e3)  # us
    ts.sort()
    return ts[len(ts) // 2]


def main():
    torch.manual_seed(0)
    results = []
    ours = None
    if OURS:
        sys.path.insert(0, os.path.dirname(__file__))
        import kvcache_launch as ours
        ours.load(PTX_DIR)
    for r in rows():
        b, L, sq, h, hk, d = r["b"], r["L"], r["sq"], r["h"], r["hk"], r["d"]
        q = torch.randn(b, h, sq, d, device="cuda", dtype=DT)
        k = torch.randn(b, hk, L, d, device="cuda", dtype=DT)
        v = torch.randn(b, hk, L, d, device="cuda", dtype=DT)
        kv_bytes = b * L * hk * d * 2 * 2
        reps = 10 if kv_bytes > 2e9 else 20
        res = dict(r, kv_bytes=kv_bytes)
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                    res[name] = timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), reps)
            except Exception as e:  # a backend refusing a shape
                res[name] = None
                res[name + "_error"] = str(e).splitlines()[0][:200]
        flat = torch.randn(kv_bytes // 2, device="cuda", dtype=DT)
        res["read"] = timed(lambda: flat.sum(dtype=torch.float32), reps)
        del flat
        if ours is not None:
            # ours on [b, s, h, d] views of the same data (the layout the kernels take)
            qo, ko, vo = (x.transpose(1, 2) for x in (q, k, v))
            call = ours.prepare(qo, ko, vo, causal=False)
            res["ours_kernels"] = timed(call, reps)
            res["ours_splits"] = call.splits
            if len(call.launches) > 1:  # the split pass alone, to see the combine's share
                alone = ours.Call(call.launches[:1], call.splits, call.keep)
                res["ours_split_pass"] = timed(alone, reps)
            if r["kind"] == "prefill":
                res["ours_dense"] = timed(ours.prepare_dense(qo, ko, vo, causal=False), reps)
        gbs = {m: kv_bytes / res[m] / 1e3 for m in ("sdpa_flash", "cudnn", "read", "ours_kernels") if res.get(m)}
        res["gbs"] = gbs
        flops = 4 * b * h * sq * L * d
        res["tflops"] = {m: flops / res[m] / 1e6 for m in ("sdpa_flash", "cudnn", "ours_kernels", "ours_dense")
                         if res.get(m)}
        results.append(res)
        print(json.dumps({k: (round(x, 1) if isinstance(x, float) else x) for k, x in res.items()
                          if k not in ("gbs", "tflops")}), " GB/s:", {m: round(x) for m, x in gbs.items()},
              " TFLOP/s:" if r["kind"] == "prefill" else "",
              {m: round(x, 1) for m, x in res["tflops"].items()} if r["kind"] == "prefill" else "", flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    json.dump(results, open(OUT, "w"), indent=1)


if __name__ == "__main__":
    main()
