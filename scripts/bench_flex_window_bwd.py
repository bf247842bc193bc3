#!/usr/bin/env python3
"""FlexAttention's backward on the sliding-window rows of `examples/bench_window.rs`
(`BENCH_PASS=bwd`), for the issue-19 table: bf16, d128, batch 2, 16 heads, sq = sk = n
(env BENCH_N, default 8192,32768); causal and windows 256, 1024, 4096 as Mistral runs them
(query i sees keys i - w + 1 .. i), softcap 30 causal and unmasked, unmasked, ALiBi
(BLOOM's slopes, score - slope[h] * |i - j|) causal and unmasked; SDPA's flash backward
on the causal row beside it. Env BENCH_ROWS=causal,causal_alibi,.. keeps the rows named.

Flex is torch.compile'd with a block mask; its backward is replayed with
torch.autograd.grad(out, (q, k, v), dO, retain_graph=True) after
`torch._functorch.config.donated_buffer = False` (else the graph's buffers are freed after
the first backward); warmed up, then 3 rounds of triton's do_bench (L2 flushed, median).
One JSON line per row: ms and TFLOP/s at FA2's count (10 d per visible pair).
"""
import json, os, statistics
import torch
import torch._functorch.config
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
import flex_mods

torch._functorch.config.donated_buffer = False
torch._dynamo.config.cache_size_limit = 64
B, H, D = 2, 16, 128
flex = torch.compile(flex_attention, dynamic=False)
# (label, causal, window, softcap); softcap "alibi": ALiBi instead
ROWS = [("causal", True, None, None), ("window256", True, 256, None),
        ("window1024", True, 1024, None), ("window4096", True, 4096, None),
        ("causal_softcap30", True, None, 30.0), ("plain", False, None, None),
        ("plain_softcap30", False, None, 30.0), ("causal_alibi", True, None, "alibi"),
        ("plain_alibi", False, None, "alibi")]
if os.environ.get("BENCH_ROWS"):
    ROWS = [r for r in ROWS if r[0] in os.environ["BENCH_ROWS"].split(",")]
SLOPES = flex_mods.bloom_slopes(H)
alibi = flex_mods.alibi_mod(SLOPES)
softcap_mod = flex_mods.softcap_mod


SOFTCAPS = {cap: softcap_mod(cap) for cap in {r[3] for r in ROWS if r[3] and r[3] != "alibi"}}
SOFTCAPS["alibi"] = alibi


def pairs(n, causal, window):
    if not causal:
        return n * n
    w = n if window is None else window
    return sum(min(i + 1, w) for i in range(n))


def main():
    torch.manual_seed(0)
    for n in [int(x) for x in os.environ.get("BENCH_N", "8192,32768").split(",")]:
        q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        do = torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16)
        calls = {}
        for label, causal, w, cap in ROWS:
            def mask(b, h, qi, ki, w=w):
                m = qi >= ki
                return m & (qi - ki < w) if w is not None else m
            bm = create_block_mask(mask, B=None, H=None, Q_LEN=n, KV_LEN=n) if causal else None
            mod = SOFTCAPS[cap] if cap else None
            out = flex(q, k, v, block_mask=bm, score_mod=mod)
            calls[label] = (lambda out=out: torch.autograd.grad(out, (q, k, v), do,
                                                                retain_graph=True))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            sdpa_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        sdpa = lambda: torch.autograd.grad(sdpa_out, (q, k, v), do, retain_graph=True)
        for f in list(calls.values()) + [sdpa]:
            f()
        torch.cuda.synchronize()
        times = {r[0]: [] for r in ROWS}
        times["sdpa_causal"] = []
        for _ in range(3):
            for label, *_ in ROWS:
                times[label].append(triton.testing.do_bench(calls[label], warmup=25, rep=100,
                                                            return_mode="median"))
            times["sdpa_causal"].append(triton.testing.do_bench(sdpa, warmup=25, rep=100,
                                                                return_mode="median"))
        for label, causal, w, _ in ROWS + [("sdpa_causal", True, None, None)]:
            ms = statistics.median(times[label])
            flops = 10.0 * D * pairs(n, causal, w) * B * H
            print(json.dumps({"n": n, "row": label, "peer": "sdpa" if label == "sdpa_causal"
                              else "flex", "bwd_ms": ms, "tflops_unmasked": flops / ms / 1e9,
                              "rounds": times[label]}), flush=True)


if __name__ == "__main__":
    main()
