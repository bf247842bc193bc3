#!/usr/bin/env python3
"""Split-count sweep of the KV-cache forward (tuning aid): per row and split count, the
median GPU time of the split pass alone and of split + combine (bench_kvcache's timing).
Usage: python3 sweep_splits.py PTX_DIR"""
import sys, os, torch
sys.path.insert(0, os.path.dirname(__file__))
sys.argv += ["/dev/null"]
import bench_kvcache as bk
import kvcache_launch as ours

ours.load(sys.argv[1])
for (b, L, sq, h, hk, d) in [(1, 4096, 1, 32, 8, 128), (1, 32768, 1, 32, 8, 128), (1, 4096, 1, 8, 1, 128),
                             (1, 32768, 1, 8, 1, 128), (1, 32768, 1, 32, 8, 64), (1, 32768, 1, 8, 1, 64),
                             (8, 32768, 1, 32, 8, 128), (1, 131072, 1, 8, 1, 128)]:
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16)
    auto = ours.prepare(q, k, v, False).splits
    line = []
    for s in sorted({4, 8, 16, 24, 32, 48, 64, 96, 128, auto}):
        call = ours.prepare(q, k, v, False, splits=s)
        t = bk.timed(call, 20)
        t1 = bk.timed(ours.Call(call.launches[:1], s, call.keep), 20)
        line.append(f"{s}{'*' if s == auto else ''}:{t:.1f}/{t1:.1f}")
    print(f"b{b} L{L} h{h}/{hk} d{d}: " + " ".join(line), flush=True)
