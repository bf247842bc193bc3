#!/usr/bin/env python3
"""A/B sweep of KV-cache forward builds (tuning aid): for each row, split count and
build (a PTX directory with its manifest.json, e.g. one emitted with --tile or from an
older commit), the median GPU time of split + combine (bench_kvcache's timing), the
builds taken in turn per row so that drift hits them alike.
Usage: python3 sweep_variants.py ROWS DIR [DIR...]
ROWS: ';'-separated `b,L,sq,h,hk,d,tiling,s1/s2/..` (tiling: key, compact, long or prefill)."""
import sys, os, torch
sys.path.insert(0, os.path.dirname(__file__))
rows_arg, dirs = sys.argv[1], sys.argv[2:]
sys.argv = sys.argv[:1] + ["-", "/dev/null"]
import bench_kvcache as bk
import kvcache_launch as ours

builds = {}
for d in dirs:
    ours.KERNELS, ours.FNS, ours.DIR = {}, {}, [None]
    ours.load(d)
    builds[d] = (ours.KERNELS, ours.FNS, ours.DIR)
TILING = {"key": "", "compact": "_compact", "long": "_long", "prefill": "_prefill"}
for row in rows_arg.split(";"):
    b, L, sq, h, hk, d, tiling, splits = row.split(",")
    b, L, sq, h, hk, d = map(int, (b, L, sq, h, hk, d))
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16)
    for s in map(int, splits.split("/")):
        line = []
        for name in dirs:
            ours.KERNELS, ours.FNS, ours.DIR = builds[name]
            call = ours.prepare(q, k, v, False, splits=s, tiling=TILING[tiling])
            line.append(f"{os.path.basename(name.rstrip('/'))} {bk.timed(call, 15):.1f}")
        print(f"b{b} L{L} sq{sq} h{h}/{hk} d{d} {tiling} s{s}: " + "  ".join(line), flush=True)
