#!/usr/bin/env python3
"""The sm_90a forward's sliding-window and plain rows side by side with FlexAttention
(issue 19's Hopper rows): ours launched from the sm90a manifest alone (scripts/
manifest_sm90.py's loader: the tensor maps encoded once per row, the tile counter reused,
as the kernel leaves it zeroed), Flex torch.compile'd with a block mask, in the same
process, in turn per round (3 rounds); medians of triton's do_bench (L2 flushed), then
the median over the rounds.

Usage: python3 scripts/bench_flex_sm90.py PTX_DIR   (PTX_DIR: emit --all --arch sm90a)
Env: BENCH_N=8192,32768; BENCH_ROWS=causal,window256,..; BENCH_ROUNDS=3; BENCH_D=128.
bf16, batch 2, 16 heads, sq = sk = n. Rows: causal; windows 256, 1024, 4096 as Mistral
runs them (query i sees keys i - w + 1 .. i: window (w - 1, 0)); plain (no mask). One JSON
line per row and round's medians: ms and TFLOP/s on the unmasked work (4 d per visible
pair) for ours and Flex, ours/Flex (time ratio Flex ms / our ms), ours against our causal
kernel (window rows); then the accuracy of both against float64 on one head (rel L2).
"""
import json, math, os, statistics, sys

import torch
import triton
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import manifest_sm90 as m90

B, H = 2, 16
D = int(os.environ.get("BENCH_D", "128"))
torch._dynamo.config.cache_size_limit = 64
flex = torch.compile(flex_attention, dynamic=False)

# (label, causal, window)
ROWS = [("causal", True, None), ("window256", True, 256), ("window1024", True, 1024),
        ("window4096", True, 4096), ("plain", False, None)]
if os.environ.get("BENCH_ROWS"):
    ROWS = [r for r in ROWS if r[0] in os.environ["BENCH_ROWS"].split(",")]


def pairs(n, causal, window):
    if not causal:
        return n * n
    w = n if window is None else window
    return sum(min(i + 1, w) for i in range(n))


def ours(man, q, k, v, o, counter, causal, window):
    """q, k, v, o: [b, s, h, d] contiguous."""
    n = q.shape[1]
    win = None if window is None else (window - 1, 0)
    kern = man.pick(D, "bf16", causal, win)
    sizes = dict(batch=B, seqlen_q=n, seqlen_k=n, heads=H, heads_k=H, head_dim=D)
    scalars = dict(o=o.data_ptr(), lse=0, seqlen_q=n, seqlen_k=n, group=1, heads=H,
                   o_row=o.stride(1), o_head=o.stride(2), o_batch=o.stride(0),
                   scale_log2=m90.LOG2E / math.sqrt(D), batch=B, tile_counter=counter.data_ptr())
    if win is not None:
        scalars.update(window_left=win[0], window_right=win[1])
    run, keep = man.prepare(kern, dict(q=q, k=k, v=v), sizes, scalars)
    return kern["name"], run, keep


def flex_call(q, k, v, causal, window):
    """q, k, v: [b, h, s, d] views."""
    n = q.shape[2]

    def mask(b, h, qi, ki):
        mm = qi >= ki
        return mm & (qi - ki < window) if window is not None else mm

    bm = create_block_mask(mask, B=None, H=None, Q_LEN=n, KV_LEN=n) if causal else None
    return lambda: flex(q, k, v, block_mask=bm)


def reference_head(q, k, v, causal, window):
    """o of batch 0, head 0 in float64 (the first 1024 queries); q, k, v [b, s, h, d]."""
    n = q.shape[1]
    qs = q[0, :1024, 0].double()
    s = (qs @ k[0, :, 0].double().T) / math.sqrt(D)
    i = torch.arange(1024, device="cuda")[:, None]
    j = torch.arange(n, device="cuda")[None, :]
    keep = j <= i if causal else torch.ones_like(j <= i)
    if window is not None:
        keep &= i - j < window
    s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v[0, :, 0].double()


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def main():
    man = m90.Manifest(sys.argv[1], m90.Driver(torch.cuda.current_device()))
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    ns = [int(x) for x in os.environ.get("BENCH_N", "8192,32768").split(",")]
    counter = torch.zeros(2, dtype=torch.int32, device="cuda")
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    for n in ns:
        torch.manual_seed(n)
        q, k, v = (torch.randn(B, n, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        calls = {}
        for label, causal, window in ROWS:
            name, run, keep = ours(man, q, k, v, o, counter, causal, window)
            calls[label] = (name, run, keep, flex_call(qt, kt, vt, causal, window))
            # warm-up (Flex compiles here) and accuracy on one head
            run()
            fo = calls[label][3]()
            torch.cuda.synchronize()
            ref = reference_head(q, k, v, causal, window)
            acc = {"ours": rel(o[0, :1024, 0], ref), "flex": rel(fo[0, 0, :1024], ref)}
            print(json.dumps({"n": n, "row": label, "kernel": name, "rel_l2": acc}), flush=True)
        times = {label: ([], []) for label, _, _ in ROWS}
        for r in range(rounds):
            for label, causal, window in ROWS:
                _, run, _, fl = calls[label]
                times[label][0].append(triton.testing.do_bench(run))
                times[label][1].append(triton.testing.do_bench(fl))
        causal_ms = statistics.median(times["causal"][0]) if "causal" in times else None
        for label, causal, window in ROWS:
            om, fm = (statistics.median(t) for t in times[label])
            work = 4.0 * B * H * D * pairs(n, causal, window)
            row = {"n": n, "row": label, "ours_ms": om, "flex_ms": fm,
                   "ours_tflops": work / om / 1e9, "flex_tflops": work / fm / 1e9,
                   "ours_over_flex": fm / om, "rounds_ours_ms": times[label][0],
                   "rounds_flex_ms": times[label][1]}
            if window is not None and causal_ms:
                row["causal_ms_over_ms"] = causal_ms / om
            print(json.dumps(row), flush=True)
        torch.cuda.synchronize()

    return 0


if __name__ == "__main__":
    sys.exit(main())
