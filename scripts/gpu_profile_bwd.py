#!/usr/bin/env python3
"""Where the backward's time goes: times each pass alone, and the main pass with and
without its dQ atomics, with CUDA events (median). Usage: gpu_profile_bwd.py PTX_DIR
[--rows D:N,...] (default 64:4096,128:4096,128:16384,256:4096). Always the standard
tiling's bwd kernel (the runtime runs d128's `_long` kernel from 8192 query rows on:
profile that with gpu_tune.py --once under ncu)."""
import warnings; warnings.filterwarnings("ignore", category=DeprecationWarning)
import math, sys
import torch
import triton

sys.argv += [] if len(sys.argv) > 1 else ["ptx"]
import gpu_check_bwd as g  # noqa: E402  (manifest-driven launches)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def main():
    rows = sys.argv[sys.argv.index("--rows") + 1] if "--rows" in sys.argv else "64:4096,128:4096,128:16384,256:4096"
    for d, n in (tuple(int(x) for x in r.split(":")) for r in rows.split(",")):
        for causal in (False, True):
            b, h = 16384 // n, 2048 // d
            dt = torch.bfloat16
            q, k, v, do = (torch.randn(b, n, h, d, device="cuda", dtype=dt) for _ in range(4))
            o, lse, dq, dk, dv, main_name = g.run(q, k, v, do, causal, False)
            c = "_causal" if causal else ""
            base = {"seqlen_q": n, "seqlen_k": n, "head_dim": d, "heads": h, "heads_per_kv": 1,
                    "scale_log2": g.LOG2E / math.sqrt(d), "softmax_scale": 1 / math.sqrt(d)}
            dvec = torch.empty(b, h, n, device="cuda")
            accum = torch.zeros(b, h, (n + 15) // 16 * 16, d, device="cuda")
            vals = dict(base, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(),
                        dvec=dvec.data_ptr(), dq_accum=accum.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(),
                        dv=dv.data_ptr(), **{"do": do.data_ptr()})
            for nm, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dk), ("dv", dv)):
                g.strides(vals, nm, t)
            kd = d
            names = {"fwd": f"fa2_fwd_d{kd}_bf16{c}_sm80", "pre": f"fa2_bwdpre_d{kd}_bf16_sm80",
                     "bwd": f"fa2_bwd_d{kd}_bf16{c}_sm80", "post": f"fa2_bwdpost_d{kd}_bf16_sm80",
                     "bwddq": f"fa2_bwddq_d{kd}_bf16{c}_sm80"}
            grid = lambda nm: ((n + g.MAN[nm]["tiles"]["block_n"] - 1) // g.MAN[nm]["tiles"]["block_n"], h, b) \
                if "_bwd_" in nm else ((n + g.MAN[nm]["tiles"]["block_m"] - 1) // g.MAN[nm]["tiles"]["block_m"], h, b)
            t = {}
            for key, nm in names.items():
                t[key] = bench(lambda: g.launch(nm, grid(nm), vals))
            nodq = dict(vals, dq_accum=0)
            t["bwd_no_dq"] = bench(lambda: g.launch(names["bwd"], grid(names["bwd"]), nodq))
            fl = 4.0 * b * h * n * n * d / (2 if causal else 1)
            print(f"d{d} n{n} causal={int(causal)}: " + " ".join(f"{k} {v:.3f}ms" for k, v in t.items())
                  + f" | fwd {fl / t['fwd'] / 1e9:.0f} TF, bwd(total) {2.5 * fl / (t['pre'] + t['bwd'] + t['post']) / 1e9:.0f} TF,"
                  f" main w/o dQ {1.5 * fl / t['bwd_no_dq'] / 1e9:.0f} TF(3 mm)", flush=True)


if __name__ == "__main__":
    main()
