#!/usr/bin/env python3
"""Fit the backward main pass's time to its CTAs' query blocks (scripts/bwd_cta_costs.sh).

    python3 scripts/bwd_cta_fit.py N PASSES.txt [MORE.txt ...]

PASSES.txt (and any more, their rows merged): scripts/bwd_pass_times.sh's output (`== <row>
rc=..` then one line per kernel, the main pass's name holding `fa2_bwd_d128`; a row given
twice takes its upper median). Rows as bench_window runs them: sq = sk = N, b2 h16, windows
`(w - 1, 0)`, the standard 64 x 64 tile row. Model, per row: T = (t * V + F * t * C) / S,
V the query blocks the CTAs visit in all (per key block of 64 keys, the 64-query blocks
its window reaches: bench_window's `work_bwd`), C the CTAs (key blocks x 32 heads), S the
CTA slots (132 SMs x 2: the H100's and H200's SMs, the kernel's occupancy), t the time of
one visited block in a slot and F, in units of t, what does not grow with the blocks
(a CTA's own costs, and anything per call, counted per CTA). Prints each row's V / C, its
time and the fit's, and t and F.
"""
import re
import sys

BM = BN = 64
HEADS = 32  # batch 2 x 16 heads


def visited(n, window):
    left = n if window is None else window - 1
    v = 0
    for n0 in range(0, n, BN):
        last_q = min(n0 + BN - 1 + left, n - 1)
        v += last_q // BM + 1 - n0 // BM
    return v * HEADS


def main():
    n = int(sys.argv[1])
    rows, row = {}, None
    lines = [l for path in sys.argv[2:] for l in open(path)]
    for line in lines:
        m = re.match(r"== (\S+) rc=", line)
        if m:
            row = m.group(1)
            continue
        m = re.match(r"\s+(fa2_bwd_d128\S*)\s+([\d.]+) us", line)
        if m and row:
            rows.setdefault(row, []).append(float(m.group(2)))
    ctas = (n // BN) * HEADS
    pts = []
    for label, times in rows.items():
        if label != "causal" and not label.removeprefix("window").isdigit():
            print(f"{label}: not a causal or window row, left out of the fit")
            continue
        w = None if label == "causal" else int(label.removeprefix("window"))
        t = sorted(times)[len(times) // 2]
        pts.append((label, visited(n, w), t))
    if len(pts) < 2:
        print("fewer than two rows: no fit")
        return
    # T = a V + c  (c = F t C / S, the same C for every row)
    k = len(pts)
    mv = sum(p[1] for p in pts) / k
    mt = sum(p[2] for p in pts) / k
    a = sum((p[1] - mv) * (p[2] - mt) for p in pts) / sum((p[1] - mv) ** 2 for p in pts)
    c = mt - a * mv
    slots = 132 * 2
    t_block = a * slots
    f = c * slots / ctas / t_block
    for label, v, t in pts:
        print(f"{label:12} blocks/CTA {v / ctas:7.2f}  main {t:10.1f} us  fit {a * v + c:10.1f} us")
    print(f"t (one block in a slot) {t_block:.3f} us; F {f:.2f} blocks per CTA "
          f"({c:.1f} us of each call; slots assumed {slots})")


if __name__ == "__main__":
    main()
