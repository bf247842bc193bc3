#!/usr/bin/env python3
"""The compiler's verdict on the sm_90a kernels' inner loops, with no GPU.

    PTXAS=.../ptxas NVDISASM=.../nvdisasm python3 scripts/sass_loops.py [--require-uniform] PTX...

Assembles each PTX file (ptxas -arch from its `.target`), disassembles the cubin (nvdisasm
-c: NVDISASM, from the `nvidia-cuda-nvdisasm` wheel, any 13.x) and prints, per innermost
loop that issues wgmma (a backward branch whose body holds HGMMA and no other such loop:
the steady key-block loops), its instructions and the mix that shows whether ptxas kept
the stage and descriptor arithmetic on the uniform datapath (UIADD3, ULEA) or moved it to
per-thread registers (IMAD, IADD3, and R2UR to feed the wgmma descriptors). Session 27
found the skip of masked visits and the chained consumer losing 3-7% to exactly that
(docs/hopper.md). --require-uniform: exit 1 when such a loop holds an R2UR, the tile loop
aside (a loop that also stores O through TMA, UTMASTG: ptxas may lay the key-block loops
out of its address range, so it looks innermost; its R2URs feed the store's coordinates
and tensor-map address, or a waterfall around the store, once per tile).
"""
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

INST = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^(\.L_x_\d+):")
BRANCH = re.compile(r"BRA\s+`\((\.L_x_\d+)\)")
SHOWN = ("HGMMA", "R2UR", "IMAD", "IADD3", "UIADD3", "ULEA", "MUFU", "FFMA")


def sass(ptx, tmp):
    target = re.search(r"^\.target\s+(\w+)", open(ptx).read(), re.M).group(1)
    cubin = os.path.join(tmp, os.path.basename(ptx) + ".cubin")
    subprocess.run([os.environ["PTXAS"], f"-arch={target}", ptx, "-o", cubin], check=True)
    out = subprocess.run([os.environ["NVDISASM"], "-c", cubin], check=True,
                         capture_output=True, text=True).stdout
    insts, labels, pending = [], {}, []
    for line in out.splitlines():
        m = LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = INST.match(line)
        if m:
            for lab in pending:
                labels[lab] = len(insts)
            pending = []
            insts.append(m.group(2))
    return insts, labels


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def hgmma_loops(insts, labels):
    loops = []
    for i, text in enumerate(insts):
        m = BRANCH.search(text)
        if m and labels.get(m.group(1), i + 1) <= i:
            start = labels[m.group(1)]
            if any(opcode(t) == "HGMMA" for t in insts[start:i + 1]):
                loops.append((start, i))
    inner = [(a, b) for a, b in loops
             if not any((c, d) != (a, b) and a <= c and d <= b for c, d in loops)]
    return sorted(set(inner))


def main(argv):
    require = "--require-uniform" in argv
    files = [a for a in argv if not a.startswith("--")]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ptx in files:
            insts, labels = sass(ptx, tmp)
            name = os.path.basename(ptx).removesuffix(".ptx")
            for a, b in hgmma_loops(insts, labels):
                mix = Counter(opcode(t) for t in insts[a:b + 1])
                cols = " ".join(f"{k} {mix[k]}" for k in SHOWN)
                # a loop that stores O through TMA is the tile loop (ptxas may lay the
                # key-block loops out of its address range): once per tile
                tile = mix["UTMASTG"] > 0
                kind = " (the tile loop: it stores O)" if tile else ""
                print(f"{name}: loop of {b - a + 1} instructions{kind}: {cols}")
                if mix["R2UR"] and not tile:
                    bad += 1
            print(f"{name}: {len(insts)} instructions in all")
    if require and bad:
        print(f"sass_loops: {bad} wgmma loops hold R2UR (off the uniform datapath)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
