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
runs them (query i sees keys i - w + 1 .. i: window (w - 1, 0)); plain (no mask); softcap
30 causal and plain (Gemma 2), ALiBi causal and plain (BLOOM's slopes). One JSON line per
row and round's medians: ms and TFLOP/s on the unmasked work (4 d per visible pair) for
ours and Flex, ours/Flex (time ratio Flex ms / our ms), our plain twin's ms over ours
(twin_ms_over_ms: the window rows against causal, the modifiers against their mask's
plain kernel); then the accuracy of both against float64 on one head (rel L2).
"""
import json, math, os, statistics, sys

import torch
import triton
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import manifest_sm90 as m90
import flex_mods

B, H = 2, 16
D = int(os.environ.get("BENCH_D", "128"))
torch._dynamo.config.cache_size_limit = 64
flex = torch.compile(flex_attention, dynamic=False)

# (label, causal, window, softcap, alibi)
ROWS = [("causal", True, None, None, False), ("window256", True, 256, None, False),
        ("window1024", True, 1024, None, False), ("window4096", True, 4096, None, False),
        ("plain", False, None, None, False), ("causal_softcap30", True, None, 30.0, False),
        ("plain_softcap30", False, None, 30.0, False), ("causal_alibi", True, None, None, True),
        ("plain_alibi", False, None, None, True)]
# our plain twin of each row (same mask, no modifier) for the cost ratio
TWIN = {"window256": "causal", "window1024": "causal", "window4096": "causal",
        "causal_softcap30": "causal", "plain_softcap30": "plain",
        "causal_alibi": "causal", "plain_alibi": "plain"}
if os.environ.get("BENCH_ROWS"):
    ROWS = [r for r in ROWS if r[0] in os.environ["BENCH_ROWS"].split(",")]


def pairs(n, causal, window):
    if not causal:
        return n * n
    w = n if window is None else window
    return sum(min(i + 1, w) for i in range(n))


SLOPES = flex_mods.bloom_slopes(H)
alibi_mod = flex_mods.alibi_mod(SLOPES)
softcap_mod = flex_mods.softcap_mod


# one score_mod per cap, made once (a fresh closure per call would recompile)
SOFTCAPS = {cap: softcap_mod(cap) for cap in {r[3] for r in ROWS if r[3]}}


def ours(man, q, k, v, o, counter, causal, window, cap, alibi):
    """q, k, v, o: [b, s, h, d] contiguous."""
    n = q.shape[1]
    win = None if window is None else (window - 1, 0)
    scores = "softcap" if cap else "alibi" if alibi else "plain"
    kern = man.pick(D, "bf16", causal, win, scores)
    sizes = dict(batch=B, seqlen_q=n, seqlen_k=n, heads=H, heads_k=H, head_dim=D)
    scalars = dict(o=o.data_ptr(), lse=0, seqlen_q=n, seqlen_k=n, group=1, heads=H,
                   o_row=o.stride(1), o_head=o.stride(2), o_batch=o.stride(0),
                   scale_log2=m90.LOG2E / math.sqrt(D), batch=B, tile_counter=counter.data_ptr())
    if win is not None:
        scalars.update(window_left=win[0], window_right=win[1])
    if cap:
        scalars.update(softcap=cap)
    if alibi:
        scalars.update(alibi_slopes=SLOPES.data_ptr(), alibi_batch_stride=0)
    run, keep = man.prepare(kern, dict(q=q, k=k, v=v, o=o), sizes, scalars)
    return kern["name"], run, keep


def flex_call(q, k, v, causal, window, cap, alibi):
    """q, k, v: [b, h, s, d] views."""
    n = q.shape[2]

    def mask(b, h, qi, ki):
        mm = qi >= ki
        return mm & (qi - ki < window) if window is not None else mm

    bm = create_block_mask(mask, B=None, H=None, Q_LEN=n, KV_LEN=n) if causal else None
    mod = alibi_mod if alibi else SOFTCAPS[cap] if cap else None
    if mod is None:
        return lambda: flex(q, k, v, block_mask=bm)
    return lambda: flex(q, k, v, block_mask=bm, score_mod=mod)


def reference_head(q, k, v, causal, window, cap, alibi):
    """o of batch 0, head 0 in float64 (the first 1024 queries); q, k, v [b, s, h, d]."""
    n = q.shape[1]
    qs = q[0, :1024, 0].double()
    s = (qs @ k[0, :, 0].double().T) / math.sqrt(D)
    i = torch.arange(1024, device="cuda")[:, None]
    j = torch.arange(n, device="cuda")[None, :]
    if cap:
        s = cap * torch.tanh(s / cap)
    if alibi:
        s = s - SLOPES[0].double() * (i - j).abs()
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
        for label, *mods in ROWS:
            name, run, keep = ours(man, q, k, v, o, counter, *mods)
            calls[label] = (name, run, keep, flex_call(qt, kt, vt, *mods))
            # warm-up (Flex compiles here) and accuracy on one head
            run()
            fo = calls[label][3]()
            torch.cuda.synchronize()
            ref = reference_head(q, k, v, *mods)
            acc = {"ours": rel(o[0, :1024, 0], ref), "flex": rel(fo[0, 0, :1024], ref)}
            print(json.dumps({"n": n, "row": label, "kernel": name, "rel_l2": acc}), flush=True)
        times = {r[0]: ([], []) for r in ROWS}
        for r in range(rounds):
            for label, *_ in ROWS:
                _, run, _, fl = calls[label]
                times[label][0].append(triton.testing.do_bench(run))
                times[label][1].append(triton.testing.do_bench(fl))
        for label, causal, window, _, _ in ROWS:
            om, fm = (statistics.median(t) for t in times[label])
            work = 4.0 * B * H * D * pairs(n, causal, window)
            row = {"n": n, "row": label, "ours_ms": om, "flex_ms": fm,
                   "ours_tflops": work / om / 1e9, "flex_tflops": work / fm / 1e9,
                   "ours_over_flex": fm / om, "rounds_ours_ms": times[label][0],
                   "rounds_flex_ms": times[label][1]}
            twin = TWIN.get(label)
            if twin in times:
                row["twin"] = twin
                row["twin_ms_over_ms"] = statistics.median(times[twin][0]) / om
            print(json.dumps(row), flush=True)
        torch.cuda.synchronize()

    return 0


if __name__ == "__main__":
    sys.exit(main())
