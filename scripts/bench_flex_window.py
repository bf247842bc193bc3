#!/usr/bin/env python3
"""The sliding-window forward side by side with FlexAttention (issue 19's window rows):
ours launched from the manifest alone (CuPy: fa2_fwd_d128_bf16_local_sm80 with
window_left/window_right, and the causal kernel), Flex torch.compile'd with a block mask,
in the same process, in turn, 3 rounds; medians of triton's do_bench (L2 flushed).

Usage: python3 scripts/bench_flex_window.py PTX_DIR   (env BENCH_N=8192,32768)
bf16, d128, batch 2, 16 heads, sq = sk = n; windows 256, 1024, 4096 as Mistral runs them
(query i sees keys i - w + 1 .. i). Prints one JSON line per row: ms and TFLOP/s on the
unmasked work (4 d per visible pair) for ours and Flex, ours/Flex, and ours/our causal;
then the accuracy of both against a float64 reference on one head (rel L2).
Written in session 14 when no device time was left: not yet run.
"""
import json, math, os, statistics, sys
import torch
import triton
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import gpu_check_kvcache as g  # the manifest loader and launcher (argv[1] = PTX_DIR)

B, H, D = 2, 16, 128
flex = torch.compile(flex_attention)


def ours(q, k, v, o, window):
    """q, k, v, o: [b, h, s, d] tensors, passed as [b, s, h, d] views (strides free)."""
    n = q.shape[2]
    local = window is not None
    name = f"fa2_fwd_d{D}_bf16_{'local' if local else 'causal'}_sm80"
    vals = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(),
            "lse": 0, "seqlen_q": n, "seqlen_k": n, "head_dim": D, "heads": H,
            "heads_per_kv": 1, "scale_log2": g.LOG2E / math.sqrt(D),
            "window_left": (window - 1) if local else 0, "window_right": 0}
    for t, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        st = x.stride()  # [b, h, s, d]
        vals.update({f"{t}_batch_stride": st[0], f"{t}_row_stride": st[2], f"{t}_head_stride": st[1]})
    bm = g.KERNELS[name]["tiles"]["block_m"]
    return lambda: g.launch(name, vals, [math.ceil(n / bm), H, B])


def flex_call(q, k, v, window):
    n = q.shape[2]

    def mask(b, h, qi, ki):
        m = qi >= ki
        return m & (qi - ki < window) if window is not None else m

    bm = create_block_mask(mask, B=None, H=None, Q_LEN=n, KV_LEN=n)
    return lambda: flex(q, k, v, block_mask=bm)


def pairs(n, window):
    w = n if window is None else window
    return sum(min(i + 1, w) for i in range(n))


def reference_head(q, k, v, window):
    """o of batch 0, head 0 in float64 (the first 1024 queries)."""
    n = q.shape[2]
    qs = q[0, 0, :1024].double()
    s = (qs @ k[0, 0].double().T) / math.sqrt(D)
    i = torch.arange(1024, device="cuda")[:, None]
    j = torch.arange(n, device="cuda")[None, :]
    keep = j <= i
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
        windows = [None, 256, 1024, 4096]
        calls = {w: (ours(q, k, v, o, w), flex_call(q, k, v, w)) for w in windows}
        for w in windows:  # warm up (Flex compiles per mask)
            for f in calls[w]:
                f()
        torch.cuda.synchronize()
        times = {w: ([], []) for w in windows}
        for _ in range(3):
            for w in windows:
                for side, f in enumerate(calls[w]):
                    times[w][side].append(triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median"))
        causal_ours = statistics.median(times[None][0])
        for w in windows:
            ms_o, ms_f = (statistics.median(t) for t in times[w])
            flops = 4.0 * D * pairs(n, w) * B * H
            calls[w][0]()
            ref = reference_head(q, k, v, w)
            err_o = rel(o[0, 0, :1024], ref)
            err_f = rel(calls[w][1]()[0, 0, :1024], ref)
            print(json.dumps({"n": n, "window": w, "ours_ms": ms_o, "flex_ms": ms_f,
                              "ours_tflops": flops / ms_o / 1e9, "flex_tflops": flops / ms_f / 1e9,
                              "ours_vs_flex": ms_f / ms_o, "ours_vs_our_causal_ms": ms_o / causal_ours,
                              "rounds": times[w], "rel_l2_ours": err_o, "rel_l2_flex": err_f}), flush=True)


if __name__ == "__main__":
    main()
