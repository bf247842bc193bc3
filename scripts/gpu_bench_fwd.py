#!/usr/bin/env python3
"""Forward speed of generated PTX next to PyTorch SDPA (flash = FA2, cuDNN), one GPU run.

Usage: python3 gpu_bench_fwd.py PTX_DIR [--quick] [--out FILE.json]
FA2-paper sweep: hidden 2048 (heads = 2048/d), 16384 tokens (batch = 16384/seqlen),
d in {64, 128, 256}, causal and not, seqlen 512..16K, bf16 and f16. CUDA-event timing
through triton.testing.do_bench (warm-up, median). Prints TFLOP/s and ours/theirs ratios.
"""
import json, math, os, sys
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check_fwd as ours  # noqa: E402

ours.PTX_DIR = sys.argv[1]
QUICK = "--quick" in sys.argv
OUT = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
DIMS = [int(x) for x in sys.argv[sys.argv.index("--dims") + 1].split(",")] if "--dims" in sys.argv else None


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def sdpa(backend, q, k, v, causal):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    rows = []
    dims = DIMS or [64, 128, 256]
    seqs = [512, 1024, 2048, 4096, 8192, 16384]
    dtypes = [torch.bfloat16, torch.float16]
    if QUICK:
        seqs, dtypes = [512, 2048, 16384], [torch.bfloat16]
    print(f"{'dtype':5s} {'d':>4s} {'causal':6s} {'seq':>6s} {'ours':>7s} {'fa2':>7s} {'cudnn':>7s} {'/fa2':>6s} {'/cudnn':>6s}")
    for dtype in dtypes:
        for d in dims:
            for causal in (False, True):
                for n in seqs:
                    b, h = 16384 // n, 2048 // d
                    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dtype) for _ in range(3))
                    o = torch.empty_like(q)
                    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
                    flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
                    t_ours = bench(lambda: ours.run_fwd(q, k, v, o, lse, causal))
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA wants b h n d
                    res = {"dtype": str(dtype).split(".")[-1], "d": d, "causal": causal, "seqlen": n,
                           "batch": b, "heads": h, "ours_tflops": flops / t_ours / 1e9}
                    for key, be in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            t = bench(lambda: sdpa(be, qt, kt, vt, causal))
                            res[f"{key}_tflops"] = flops / t / 1e9
                        except Exception as e:  # a backend may refuse a shape
                            res[f"{key}_tflops"] = float("nan")
                    res["ours_over_fa2"] = res["ours_tflops"] / res["fa2_tflops"]
                    res["ours_over_cudnn"] = res["ours_tflops"] / res["cudnn_tflops"]
                    rows.append(res)
                    print(f"{res['dtype']:5s} {d:4d} {str(causal):6s} {n:6d} {res['ours_tflops']:7.1f} "
                          f"{res['fa2_tflops']:7.1f} {res['cudnn_tflops']:7.1f} {res['ours_over_fa2']:6.2f} "
                          f"{res['ours_over_cudnn']:6.2f}", flush=True)
                    del q, k, v, o, lse
    if OUT:
        with open(OUT, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
