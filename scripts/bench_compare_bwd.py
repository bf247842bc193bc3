#!/usr/bin/env python3
"""Compare flash-ptx's backward benchmark with PyTorch SDPA (FlashAttention-2 and cuDNN).

Runs on the GPU machine (python3 with torch and triton). Reads our rows from the JSON that
`cargo run --release --features gpu --example bench_bwd` writes (path: argv[1], else env
BENCH_OUT, else bench_bwd.json), times torch SDPA's flash and cuDNN backends' BACKWARD on
the same rows (inputs with requires_grad; the forward runs once outside the timing, then
`out.backward(dO, retain_graph=True)` is timed with triton.testing.do_bench, median, grads
reset to None before each call as in a training step), prints ours/flash and ours/cudnn
TFLOP/s ratios (backward FLOPs = 2.5 x forward FLOPs, half if causal) and writes a combined
JSON (env COMPARE_OUT, default bench_compare_bwd.json).

If our JSON has a "memory" section (BENCH_MEM=1 run), it also measures the peers' extra
memory for forward + backward on the same shape (torch.cuda.max_memory_allocated beyond the
inputs q, k, v, dO) and prints it next to ours.

Without our JSON it still times the peers on the default sweep (filters: BENCH_D,
BENCH_SEQ, BENCH_DTYPE, BENCH_CAUSAL, as for bench_bwd).

Grouped-query rows (our rows with "heads_k" != "h", from bench_bwd's BENCH_HEADS): the
peers get q, dO [b, h, n, d] and k, v [b, heads_k, n, d] and run SDPA with enable_gqa=True;
a backend that raises records None (`*_bwd_ms`, `*_bwd_tflops`) and its error. Rows that
differ only in "group_splits" (our split count) share one peer timing. MHA rows run as
before. Env COMPARE_REP / COMPARE_WARMUP: do_bench's rep / warmup in ms (default 100 / 25).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_compare import DTYPES, PEERS, default_rows, flops_fwd, ratio

GIB = float(1 << 30)


WARMUP_MS = float(os.environ.get("COMPARE_WARMUP") or 25)
REP_MS = float(os.environ.get("COMPARE_REP") or 100)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")


def peer_inputs(dtype, b, h, n, d, hk=None):
    if hk is None or hk == h:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
    else:  # grouped-query: k, v with heads_k heads
        q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True)
        k, v = (torch.randn(b, hk, n, d, device="cuda", dtype=dtype, requires_grad=True)
                for _ in range(2))
    return q, k, v, torch.randn(b, h, n, d, device="cuda", dtype=dtype)


def time_peer_bwd(backend, dtype, b, h, n, d, causal, hk=None):
    q, k, v, d_o = peer_inputs(dtype, b, h, n, d, hk)
    # MHA rows call SDPA exactly as before; GQA rows add enable_gqa
    kw = {} if hk is None or hk == h else {"enable_gqa": True}
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)

    def run():
        q.grad = k.grad = v.grad = None
        with sdpa_kernel([backend]):
            out.backward(d_o, retain_graph=True)

    run()  # raises if the backend cannot take this shape
    return bench(run)


def peer_memory(backend, dtype, b, h, n, d, causal):
    """Peak bytes beyond q, k, v, dO of one forward + backward (grads included)."""
    torch.cuda.empty_cache()
    q, k, v, d_o = peer_inputs(dtype, b, h, n, d)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.backward(d_o)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del q, k, v, d_o, out
    torch.cuda.empty_cache()
    return peak


def fmt(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BENCH_OUT", "bench_bwd.json")
    ours = None
    if os.path.exists(path):
        with open(path) as f:
            ours = json.load(f)
        rows = [dict(r) for r in ours.get("rows", [])]
    else:
        print(f"note: {path} not found, timing the peers only", file=sys.stderr)
        rows = default_rows()
    gqa_done = {}  # (shape, peer) -> (ms or None, error or None): rows differing in splits
    for r in rows:
        fb = 2.5 * flops_fwd(r["b"], r["h"], r["n"], r["d"], r["causal"])
        hk = r.get("heads_k", r["h"])
        gqa = hk != r["h"]
        for name, backend in PEERS.items():
            if gqa:
                key = (r["dtype"], r["d"], r["causal"], r["n"], r["b"], r["h"], hk, name)
                if key not in gqa_done:
                    try:
                        gqa_done[key] = (time_peer_bwd(backend, DTYPES[r["dtype"]], r["b"], r["h"],
                                                       r["n"], r["d"], r["causal"], hk), None)
                    except Exception as e:  # noqa: BLE001 - record None and go on
                        gqa_done[key] = (None, repr(e)[:160])
                    torch.cuda.empty_cache()
                ms, err = gqa_done[key]
                r[f"{name}_bwd_ms"] = ms
                r[f"{name}_bwd_tflops"] = fb / ms / 1e9 if ms else None
                if err:
                    r[f"{name}_error"] = err
                continue
            try:
                ms = time_peer_bwd(backend, DTYPES[r["dtype"]], r["b"], r["h"], r["n"], r["d"],
                                   r["causal"])
                r[f"{name}_bwd_ms"], r[f"{name}_bwd_tflops"] = ms, fb / ms / 1e9
            except Exception as e:  # noqa: BLE001 - record and go on
                r[f"{name}_error"] = repr(e)[:160]
            torch.cuda.empty_cache()
        ours_tf = r.get("bwd_tflops") if not r.get("error") else None
        r["ours_over_flash"] = ratio(ours_tf, r.get("sdpa_flash_bwd_tflops"))
        r["ours_over_cudnn"] = ratio(ours_tf, r.get("sdpa_cudnn_bwd_tflops"))
        heads = f"h={r['h']}/{hk} split={r.get('group_splits', 0)}  " if gqa else ""
        print(f"{r['dtype']:5} d={r['d']:3} causal={int(r['causal'])} n={r['n']:5}  {heads}"
              f"ours {fmt(ours_tf):>7}  flash {fmt(r.get('sdpa_flash_bwd_tflops')):>7}  "
              f"cudnn {fmt(r.get('sdpa_cudnn_bwd_tflops')):>7} TFLOP/s   "
              f"ours/flash {fmt(r['ours_over_flash']):>5}  ours/cudnn {fmt(r['ours_over_cudnn']):>5}"
              f"  {r.get('error') or ''}", flush=True)
    memory = []
    for m in (ours or {}).get("memory", []):
        b, n, h, d = m["shape"]
        m = dict(m)
        for name, backend in PEERS.items():
            try:
                m[f"{name}_gib"] = peer_memory(backend, torch.float16, b, h, n, d, True) / GIB
            except Exception as e:  # noqa: BLE001
                m[f"{name}_error"] = repr(e)[:160]
        print(f"extra memory {m['mode']:13} ours {m['measured_gib']:.3f} GiB (computed "
              f"{m['computed_gib']:.3f})  flash {fmt(m.get('sdpa_flash_gib'))}  "
              f"cudnn {fmt(m.get('sdpa_cudnn_gib'))} GiB", flush=True)
        memory.append(m)
    report = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
        "ours_gpu": ours.get("gpu") if ours else None, "rows": rows, "memory": memory,
    }
    out = os.environ.get("COMPARE_OUT", "bench_compare_bwd.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
