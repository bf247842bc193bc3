#!/usr/bin/env python3
"""Compare flash-ptx's forward benchmark with PyTorch SDPA (FlashAttention-2 and cuDNN).

Runs on the GPU machine (python3 with torch and triton). Reads our rows from the JSON that
`cargo run --release --features gpu --example bench_fwd` writes (path: argv[1], else env
BENCH_OUT, else bench_fwd.json), times torch SDPA's flash and cuDNN backends on the same
rows (same sweep as the FA2 paper: hidden 2048, 16384 tokens; timing as in
/work/shared/tools/peer_bench.py: triton.testing.do_bench median), prints ours/flash and
ours/cudnn TFLOP/s ratios per row and writes a combined JSON (env COMPARE_OUT, default
bench_compare.json).

Without our JSON it still times the peers on the default sweep (filters: BENCH_D,
BENCH_SEQ, BENCH_DTYPE, BENCH_CAUSAL, as for bench_fwd). BENCH_FLEX=1 adds PyTorch's
FlexAttention (torch.compile'd, a causal block mask when causal; it compiles once per
shape) as a third peer, printed as ours/flex. Rows with `hk` below `h` (bench_fwd's
BENCH_GROUP) are GQA: k and v with hk heads, the peers called with enable_gqa=True.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS, HIDDEN = 16384, 2048
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
PEERS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}
if os.environ.get("BENCH_FLEX") == "1":
    PEERS["flex"] = "flex"
_FLEX = {}


def env_list(name, default, conv=int):
    s = os.environ.get(name)
    return [conv(x) for x in s.split(",") if x.strip()] if s else default


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def flops_fwd(b, h, n, d, causal):
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


def default_rows():
    rows = []
    for dt in env_list("BENCH_DTYPE", ["bf16", "f16"], str):
        for d in env_list("BENCH_D", [64, 128, 256]):
            for causal in env_list("BENCH_CAUSAL", [0, 1]):
                for n in env_list("BENCH_SEQ", [512, 1024, 2048, 4096, 8192, 16384]):
                    h = HIDDEN // d
                    rows.append({"dtype": dt, "d": d, "causal": bool(causal), "n": n,
                                 "b": TOKENS // n, "h": h,
                                 "hk": h // int(os.environ.get("BENCH_GROUP", "1"))})
    return rows


def flex_fn(n, causal):
    """FlexAttention compiled once per process; its block mask per (n, causal)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if "fn" not in _FLEX:
        torch._dynamo.config.cache_size_limit = 64
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    bm = None
    if causal:
        bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, n, n, device="cuda")
    return lambda q, k, v, gqa: _FLEX["fn"](q, k, v, block_mask=bm, enable_gqa=gqa)


def time_peer(backend, dtype, b, h, n, d, causal, hk=None):
    hk = h if hk is None else hk
    gqa = hk != h
    q = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, hk, n, d, device="cuda", dtype=dtype) for _ in range(2))

    if backend == "flex":
        f = flex_fn(n, causal)

        def run():
            return f(q, k, v, gqa)
    else:
        def run():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    with torch.no_grad():
        run()  # raises if the backend cannot take this shape
        return bench(run)


def ratio(a, b):
    if a is None or b is None or not (a > 0 and b > 0) or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BENCH_OUT", "bench_fwd.json")
    ours = None
    if os.path.exists(path):
        with open(path) as f:
            ours = json.load(f)
        rows = [dict(r) for r in ours["rows"]]
    else:
        print(f"note: {path} not found, timing the peers only", file=sys.stderr)
        rows = default_rows()
    for r in rows:
        ff = flops_fwd(r["b"], r["h"], r["n"], r["d"], r["causal"])
        for name, backend in PEERS.items():
            try:
                ms = time_peer(backend, DTYPES[r["dtype"]], r["b"], r["h"], r["n"], r["d"],
                               r["causal"], r.get("hk"))
                r[f"{name}_ms"], r[f"{name}_tflops"] = ms, ff / ms / 1e9
            except Exception as e:  # noqa: BLE001 - record and go on
                r[f"{name}_error"] = repr(e)[:160]
            torch.cuda.empty_cache()
        ours_tf = r.get("fwd_tflops") if not r.get("error") else None
        r["ours_over_flash"] = ratio(ours_tf, r.get("sdpa_flash_tflops"))
        r["ours_over_cudnn"] = ratio(ours_tf, r.get("sdpa_cudnn_tflops"))
        fmt = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"
        r["ours_over_flex"] = ratio(ours_tf, r.get("flex_tflops"))
        flex_col = (f"  flex {fmt(r.get('flex_tflops')):>7}  ours/flex {fmt(r['ours_over_flex']):>5}"
                    if "flex" in PEERS else "")
        gqa = f" hk={r['hk']}" if r.get("hk", r["h"]) != r["h"] else ""
        print(f"{r['dtype']:5} d={r['d']:3} causal={int(r['causal'])} n={r['n']:5}{gqa}  "
              f"ours {fmt(ours_tf):>7}  flash {fmt(r.get('sdpa_flash_tflops')):>7}  "
              f"cudnn {fmt(r.get('sdpa_cudnn_tflops')):>7} TFLOP/s   "
              f"ours/flash {fmt(r['ours_over_flash']):>5}  ours/cudnn {fmt(r['ours_over_cudnn']):>5}"
              f"{flex_col}  {r.get('error') or ''}", flush=True)
    report = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
        "ours_gpu": ours.get("gpu") if ours else None, "rows": rows,
    }
    out = os.environ.get("COMPARE_OUT", "bench_compare.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
