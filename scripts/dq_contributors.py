#!/usr/bin/env python3
"""The fold of BwdPost into the main backward pass (docs/performance.md, session 34) needs,
per query block m, how many key blocks add into its dQ accumulator. The main pass visits,
for key block n, the query blocks [first(n), end(n)) (kernels/sm80/bwd/open.rs:
`KeyBlock::open`'s m_first and n_qblocks); both are monotone in n, so m's contributors are
one run of key blocks [n_a(m), n_b(m)]. This checks the closed form below against that
rule by brute force over random lengths, block sizes and windows, and that the last key
block's range ends at the last query block (no unvisited suffix); exit status 1 on any
mismatch.

    python3 scripts/dq_contributors.py [CASES]

With shift = sk - sq, NK = ceil(sk / bn), a window (left, right):
    n_a = max(0, ceil(((m + 1) bm - (left - shift + bn + bm - 1)) / bn))
    n_b = min(NK - 1, ceil(((m + 1) bm + shift + right) / bn) - 1)
causal: n_a = 0 and the same n_b with right = 0; no mask: 0 and NK - 1; count =
max(0, n_b - n_a + 1).
"""
import random
import sys


def cdiv(a, b):
    """ceil(a / b) for b > 0 and any sign of a."""
    return -((-a) // b)


def visits(n, sq, sk, bm, bn, win):
    """The main pass's query blocks [first, end) for key block n (open.rs)."""
    nq, first_q = cdiv(sq, bm), n * bn - (sk - sq)
    if win == "all":
        return 0, nq
    if win == "causal":
        return max(first_q, 0) // bm, nq
    left, right = win
    lo = max(first_q - right, 0)
    end = min(max(first_q + left + bn + bm - 1, 0) // bm, nq)
    return min(lo // bm, end), end


def contributors(m, sq, sk, bm, bn, win):
    """The closed form: (n_a, n_b)."""
    nk, shift = cdiv(sk, bn), sk - sq
    if win == "all":
        return 0, nk - 1
    left, right = (None, 0) if win == "causal" else win
    n_b = min(nk - 1, cdiv((m + 1) * bm + shift + right, bn) - 1)
    if win == "causal":
        return 0, n_b
    return max(0, cdiv((m + 1) * bm - (left - shift + bn + bm - 1), bn)), n_b


def main():
    random.seed(34)
    shapes = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    bad = checked = 0
    for _ in range(shapes):
        sq, sk = random.randint(1, 700), random.randint(1, 700)
        bm, bn = random.choice([16, 32, 64, 128]), random.choice([16, 32, 64, 128])
        # windows clamped as the kernels clamp them (left <= sk, right <= sq)
        left, right = random.randint(0, 800), random.randint(0, 800)
        win = random.choice(["all", "causal", (min(left, sk), min(right, sq)),
                             (min(left % 50, sk), 0), (sk, min(right % 30, sq))])
        # no suffix of query blocks goes unvisited (docs/wip/bwd-dq-fold.patch converts the
        # unvisited prefix only)
        if visits(cdiv(sk, bn) - 1, sq, sk, bm, bn, win)[1] != cdiv(sq, bm):
            bad += 1
            print(f"the last key block stops short: sq={sq} sk={sk} bm={bm} bn={bn} win={win}")
        for m in range(cdiv(sq, bm)):
            runs = [n for n in range(cdiv(sk, bn))
                    if visits(n, sq, sk, bm, bn, win)[0] <= m < visits(n, sq, sk, bm, bn, win)[1]]
            n_a, n_b = contributors(m, sq, sk, bm, bn, win)
            checked += 1
            if len(runs) != max(0, n_b - n_a + 1) or (runs and (runs[0], runs[-1]) != (n_a, n_b)):
                bad += 1
                if bad <= 5:
                    print(f"mismatch sq={sq} sk={sk} bm={bm} bn={bn} win={win} m={m}: "
                          f"visited by {runs[:3]}..{runs[-3:]}, formula {n_a}..{n_b}")
    print(f"{checked} query blocks checked, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
