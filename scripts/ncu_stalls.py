#!/usr/bin/env python3
"""Summarise an Nsight Compute report exported as CSV (scripts/sm90_ncu_window.sh).

    python3 scripts/ncu_stalls.py DETAILS.csv SASS.csv [TOP]

DETAILS.csv (`--page details --csv`): the duration, throughputs, pipe activity, L2 hit
rate and warp-state lines. SASS.csv (`--page source --csv --print-source sass`): the
warp-stall samples per instruction, summed per opcode and listed for the TOP (default 30)
busiest instructions, each with its address and the stall-reason columns it leads, and
the regions of equally often executed instructions (a loop body, a once-per-tile stretch)
with their share of the samples.
"""
import csv
import sys
from collections import Counter

KEEP = (
    "Duration", "Compute (SM) Throughput", "Memory Throughput", "L2 Hit Rate",
    "DRAM Throughput", "L1/TEX Hit Rate", "Executed Ipc Active", "Issue Slots Busy",
    "Warp Cycles Per Issued Instruction", "Avg. Active Threads Per Warp",
    "Registers Per Thread", "Dynamic Shared Memory Per Block", "Grid Size",
)


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    return list(csv.reader(lines))


def details(path):
    r = rows(path)
    if not r:
        print(f"(no rows in {path})")
        return
    head = r[0]
    name, unit, value = (head.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value"))
    sec = head.index("Section Name")
    for x in r[1:]:
        if x[name] in KEEP or x[sec] == "WarpStateStats" or "Pipe" in x[name]:
            print(f"  {x[sec][:22]:22} {x[name][:48]:48} {x[value]:>14} {x[unit]}")


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def sass(path, top):
    r = rows(path)
    # the source page starts with the kernel's name, then the column header
    r = r[next((i for i, x in enumerate(r) if x and x[0] == "Address"), 0):]
    if not r:
        print(f"(no rows in {path})")
        return
    head = r[0]
    src = next(i for i, c in enumerate(head) if c == "Source")
    addr = next((i for i, c in enumerate(head) if c == "Address"), 0)
    allc = next(i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
    reasons = [i for i, c in enumerate(head) if c.startswith("stall_") and "Not Issued" not in c]
    body = r[1:]
    total = sum(num(x[allc]) for x in body) or 1.0
    print(f"  samples {total:.0f}; stall columns: {[head[i] for i in reasons][:24]}")
    per_op = Counter()
    for x in body:
        op = x[src].split()[0] if x[src].split() else "?"
        if op.startswith("@"):
            op = x[src].split()[1] if len(x[src].split()) > 1 else op
        per_op[op.split(".")[0]] += num(x[allc])
    print("  by opcode: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in per_op.most_common(16)))
    reason_tot = Counter()
    for x in body:
        for i in reasons:
            reason_tot[head[i]] += num(x[i])
    if reason_tot:
        print("  by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in reason_tot.most_common(12)))
    # code regions: runs of instructions executed equally often (a loop body, a
    # once-per-tile stretch), with their index range and share of the samples
    ex = head.index("Instructions Executed")
    print("  regions (instructions [from, to), executions, samples):")
    start, cur, acc = 0, None, 0.0
    for i, x in enumerate(body + [None]):
        key = None if x is None else x[ex]
        if i and key != cur:
            if 100 * acc / total >= 0.3:
                print(f"    [{start:5d}, {i:5d}) {cur:>10} {100 * acc / total:6.2f}%")
            start, acc = i, 0.0
        if x is not None:
            cur = key
            acc += num(x[allc])
    for x in sorted(body, key=lambda x: -num(x[allc]))[:top]:
        lead = sorted(((num(x[i]), head[i]) for i in reasons), reverse=True)[:2]
        why = " ".join(f"{n}={v:.0f}" for v, n in lead if v)
        print(f"  {100 * num(x[allc]) / total:5.1f}% {x[addr]:>8} {x[src][:70]:70} {why}")


if __name__ == "__main__":
    details(sys.argv[1])
    sass(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 30)
