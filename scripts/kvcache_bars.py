#!/usr/bin/env python3
"""The KV-cache forward's bars (issue 17) from kvcache_all.sh's runs: per row the median
over the interleaved runs of ours (examples/bench_kvcache: the public call) and of the
peers and the read ceiling (scripts/bench_kvcache.py), then each bar on its rows: a ratio
bar holds when its geomean meets it and every row is within 0.02 below.

Usage: python3 kvcache_bars.py OUT_DIR   (reads ours_*.jsonl and peers_*.json)"""
import glob, json, math, os, statistics, sys

out = sys.argv[1]
KEY = ("kind", "b", "L", "sq", "h", "hk", "d")
ours, peers, dense = {}, {}, []
for f in sorted(glob.glob(os.path.join(out, "ours_*.jsonl"))):
    for line in open(f):
        r = json.loads(line)
        if r["kind"] == "dense":
            dense.append(r["tflops"])
        elif "ours_us" in r and not r.get("error"):
            ours.setdefault(tuple(r[k] for k in KEY), []).append(r)
for f in sorted(glob.glob(os.path.join(out, "peers_*.json"))):
    for r in json.load(open(f)):
        peers.setdefault(tuple(r[k] for k in KEY), []).append(r)

med = statistics.median
dense_tf = med(dense) if dense else float("nan")
rows = []
for key in sorted(ours, key=lambda k: (k[0] != "decode", k[6], k[4] // k[5], k[1], k[2], k[3])):
    if key not in peers:
        continue
    o = med([r["ours_us"] for r in ours[key]])
    p = {m: med([r[m] for r in peers[key] if r.get(m)]) for m in ("sdpa_flash", "cudnn", "read")
         if any(r.get(m) for r in peers[key])}
    best = min(p[m] for m in ("sdpa_flash", "cudnn") if m in p)
    kind, b, L, sq, h, hk, d = key
    flops = 4 * b * h * sq * L * d
    rows.append(dict(key=key, ours=o, splits=ours[key][0].get("splits"), **p, vs_best=best / o,
                     vs_fa2=p["sdpa_flash"] / o if "sdpa_flash" in p else None,
                     vs_cudnn=p["cudnn"] / o if "cudnn" in p else None,
                     ceil=p["read"] / o, tflops=flops / o / 1e6, gbs=ours[key][0]["kv_bytes"] / o / 1e3))

print(f"runs: ours {len(glob.glob(os.path.join(out, 'ours_*.jsonl')))}, peers "
      f"{len(glob.glob(os.path.join(out, 'peers_*.json')))}; dense forward (b2 sq=sk=8192 h16 d128): "
      f"{dense_tf:.1f} TFLOP/s (median)")
print(f"{'row':44s} {'splits':>6s} {'ours us':>9s} {'fa2 us':>9s} {'cudnn us':>9s} {'read us':>9s} "
      f"{'GB/s':>6s} {'vs best':>7s} {'of read':>7s}")
for r in rows:
    kind, b, L, sq, h, hk, d = r["key"]
    name = f"{kind} b{b} L{L} sq{sq} {h}/{hk} d{d}"
    print(f"{name:44s} {r['splits']!s:>6s} {r['ours']:9.1f} {r.get('sdpa_flash', float('nan')):9.1f} "
          f"{r.get('cudnn', float('nan')):9.1f} {r['read']:9.1f} {r['gbs']:6.0f} {r['vs_best']:7.2f} "
          f"{r['ceil']:7.2f}" + (f"  {r['tflops']:.1f} TFLOP/s, {r['tflops'] / dense_tf:.2f} of dense"
                                if kind == "prefill" else ""))


def bar(name, sel, value, target):
    xs = [(r, value(r)) for r in rows if sel(r)]
    if not xs:
        print(f"BAR {name}: no rows")
        return
    g = math.exp(sum(math.log(v) for _, v in xs) / len(xs))
    worst = min(xs, key=lambda x: x[1])
    ok = g >= target and worst[1] >= target - 0.02
    print(f"BAR {name}: {'MET' if ok else 'NOT MET'} (target {target}): geomean {g:.3f} over {len(xs)} "
          f"rows, worst {worst[1]:.3f} at {worst[0]['key']}")
    for r, v in xs:
        if v < target - 0.02:
            print(f"    below: {r['key']} {v:.3f}")


dec = lambda r: r["key"][0] == "decode"
k = lambda r, i: r["key"][i]
bar("sq1 d128 >= 0.85 of the read ceiling (b1 from 32K, b64 from 4K)",
    lambda r: dec(r) and k(r, 3) == 1 and k(r, 6) == 128 and
    ((k(r, 1) == 1 and k(r, 2) >= 32768) or (k(r, 1) == 64 and k(r, 2) >= 4096)), lambda r: r["ceil"], 0.85)
bar("sq1 >= 1.0x the better of FA2 and cuDNN, every row", lambda r: dec(r) and k(r, 3) == 1,
    lambda r: r["vs_best"], 1.0)
bar("sq 4-16, group <= 4: >= 0.70 of the read ceiling from 32K",
    lambda r: dec(r) and 4 <= k(r, 3) <= 16 and k(r, 4) // k(r, 5) <= 4 and k(r, 2) >= 32768,
    lambda r: r["ceil"], 0.70)
bar("chunked prefill >= 0.70 of our dense forward's TFLOP/s", lambda r: k(r, 0) == "prefill",
    lambda r: r["tflops"] / dense_tf, 0.70)
bar("chunked prefill >= 1.0x cuDNN", lambda r: k(r, 0) == "prefill", lambda r: r["vs_cudnn"], 1.0)
