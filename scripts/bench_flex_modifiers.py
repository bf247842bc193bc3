#!/usr/bin/env python3
"""The modifier forwards side by side with FlexAttention (issue 19's bench rows): ours
launched from the manifest alone (CuPy: the fa2_fwd_d128_bf16{,_causal,_local}{,_softcap}
kernels with window_left/window_right and softcap, {,_causal}_alibi with BLOOM's slopes),
Flex torch.compile'd with a block mask
and a score_mod, in the same process, in turn, 3 rounds; medians of triton's do_bench
(L2 flushed).

Usage: python3 scripts/bench_flex_modifiers.py PTX_DIR   (env BENCH_N=8192,32768)
bf16, d128, batch 2, 16 heads, sq = sk = n. Rows: causal; windows 256, 1024, 4096 as
Mistral runs them (query i sees keys i - w + 1 .. i); softcap 30 causal and unmasked;
unmasked; ALiBi (BLOOM's slopes for 16 heads, Flex: score - slope[h] * |i - j|) causal
and unmasked. Env BENCH_ROWS=causal,causal_alibi,.. keeps the rows named. Prints one JSON line per row: ms and TFLOP/s on the unmasked work (4 d per
visible pair) for ours and Flex, ours/Flex, ours against our plain kernel of the same
mask; then the accuracy of both against a float64 reference on one head (rel L2).
"""
import json, math, os, statistics, sys
import torch
import triton
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import gpu_check_kvcache as g  # the manifest loader and launcher (argv[1] = PTX_DIR)
import flex_mods

B, H, D = 2, 16, 128
# every (mask, score_mod, length) compiles once; past the default cache size dynamo falls
# back to the unfused math path (it ran out of memory at 32K)
torch._dynamo.config.cache_size_limit = 64
flex = torch.compile(flex_attention, dynamic=False)

# (label, causal, window, softcap, alibi); window w: causal within the last w keys
ROWS = [
    ("causal", True, None, None, False),
    ("window256", True, 256, None, False),
    ("window1024", True, 1024, None, False),
    ("window4096", True, 4096, None, False),
    ("causal_softcap30", True, None, 30.0, False),
    ("plain", False, None, None, False),
    ("plain_softcap30", False, None, 30.0, False),
    ("causal_alibi", True, None, None, True),
    ("plain_alibi", False, None, None, True),
]
if os.environ.get("BENCH_ROWS"):
    ROWS = [r for r in ROWS if r[0] in os.environ["BENCH_ROWS"].split(",")]
# our plain twin of each row (same mask, no modifier) for the cost ratio
TWIN = {"window256": "causal", "window1024": "causal", "window4096": "causal",
        "causal_softcap30": "causal", "plain_softcap30": "plain",
        "causal_alibi": "causal", "plain_alibi": "plain"}
SLOPES = flex_mods.bloom_slopes(H)
alibi = flex_mods.alibi_mod(SLOPES)
softcap_mod = flex_mods.softcap_mod


def ours(q, k, v, o, causal, window, cap, bias):
    """q, k, v, o: [b, h, s, d] tensors, passed as [b, s, h, d] views (strides free)."""
    n = q.shape[2]
    mask = "_local" if window is not None else ("_causal" if causal else "")
    scores = "_softcap" if cap else ("_alibi" if bias else "")
    name = f"fa2_fwd_d{D}_bf16{mask}{scores}_sm80"
    vals = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(),
            "lse": 0, "seqlen_q": n, "seqlen_k": n, "head_dim": D, "heads": H,
            "heads_per_kv": 1, "scale_log2": g.LOG2E / math.sqrt(D),
            "window_left": (window - 1) if window else 0, "window_right": 0,
            "softcap": cap or 0.0, "alibi_slopes": SLOPES.data_ptr(), "alibi_batch_stride": 0}
    for t, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        st = x.stride()  # [b, h, s, d]
        vals.update({f"{t}_batch_stride": st[0], f"{t}_row_stride": st[2], f"{t}_head_stride": st[1]})
    bm = g.KERNELS[name]["tiles"]["block_m"]
    return lambda: g.launch(name, vals, [math.ceil(n / bm), H, B])


def flex_call(q, k, v, causal, window, cap, bias):
    n = q.shape[2]

    def mask(b, h, qi, ki):
        m = qi >= ki
        return m & (qi - ki < window) if window is not None else m

    bm = create_block_mask(mask, B=None, H=None, Q_LEN=n, KV_LEN=n) if causal else None
    if bias:
        return lambda: flex(q, k, v, block_mask=bm, score_mod=alibi)
    if cap is None:
        return lambda: flex(q, k, v, block_mask=bm)
    return lambda: flex(q, k, v, block_mask=bm, score_mod=SOFTCAPS[cap])


# one score_mod per cap, made once (a fresh closure per call would recompile)
SOFTCAPS = {cap: softcap_mod(cap) for cap in {r[3] for r in ROWS if r[3]}}


def pairs(n, causal, window):
    if not causal:
        return n * n
    w = n if window is None else window
    return sum(min(i + 1, w) for i in range(n))


def reference_head(q, k, v, causal, window, cap, bias):
    """o of batch 0, head 0 in float64 (the first 1024 queries)."""
    n = q.shape[2]
    qs = q[0, 0, :1024].double()
    s = (qs @ k[0, 0].double().T) / math.sqrt(D)
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    i = torch.arange(1024, device="cuda")[:, None]
    j = torch.arange(n, device="cuda")[None, :]
    if bias:
        s = s - SLOPES[0].double() * (i - j).abs()
    keep = j <= i if causal else torch.ones_like(j <= i)
    if window is not None:
        keep &= i - j < window
    s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v[0, 0].double()


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def main():
    torch.manual_seed(0)
    for n in [int(x) for x in os.environ.get("BENCH_N", "8192,32768").split(",")]:
        q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        calls = {r[0]: (ours(q, k, v, o, *r[1:]), flex_call(q, k, v, *r[1:])) for r in ROWS}
        for r in ROWS:  # warm up (Flex compiles per mask and score_mod)
            for f in calls[r[0]]:
                f()
        torch.cuda.synchronize()
        times = {r[0]: ([], []) for r in ROWS}
        for _ in range(3):
            for r in ROWS:
                for side, f in enumerate(calls[r[0]]):
                    times[r[0]][side].append(triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median"))
        med = {r[0]: tuple(statistics.median(t) for t in times[r[0]]) for r in ROWS}
        for label, causal, w, cap, bias in ROWS:
            ms_o, ms_f = med[label]
            flops = 4.0 * D * pairs(n, causal, w) * B * H
            calls[label][0]()
            ref = reference_head(q, k, v, causal, w, cap, bias)
            err_o = rel(o[0, 0, :1024], ref)
            err_f = rel(calls[label][1]()[0, 0, :1024], ref)
            twin = TWIN.get(label)
            line = {"n": n, "row": label, "ours_ms": ms_o, "flex_ms": ms_f,
                    "ours_tflops": flops / ms_o / 1e9, "flex_tflops": flops / ms_f / 1e9,
                    "ours_vs_flex": ms_f / ms_o, "rounds": times[label],
                    "rel_l2_ours": err_o, "rel_l2_flex": err_f,
                    "err_ours_vs_flex": err_o / err_f}
            if twin in med:
                line["twin"] = twin
                line["twin_ms_over_ours_ms"] = med[twin][0] / ms_o
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
