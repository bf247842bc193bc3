#!/usr/bin/env python3
"""Throughput of the multi-function unit's operations on this GPU (the softcap forward's
question: does `tanh.approx.f32` issue at `ex2.approx`'s rate?), beside FFMA's.

    python3 scripts/mufu_rate.py

Each row: a kernel of 8 independent chains per thread of one PTX operation (a PTX module
loaded through CuPy, no compiler), SMs * 8 blocks of 256 threads, timed with CUDA events (median of 5
after a warm-up), as operations per clock per SM at the SM clock nvidia-smi reports
while it runs, and relative to ex2.approx.ftz.f32.
"""
import os
import statistics
import subprocess
import tempfile

import cupy as cp

# each a PTX statement on register A (f32; the packed op through a .b32 view)
OPS = {
    "ex2.approx.ftz.f32": "ex2.approx.ftz.f32 A, A;",
    "tanh.approx.f32": "tanh.approx.f32 A, A;",
    "rcp.approx.ftz.f32": "rcp.approx.ftz.f32 A, A;",
    "tanh + ex2 (alternate)": None,
    "ex2.approx.f16x2 (2 results)": "mov.b32 %u, A; ex2.approx.f16x2 %u, %u; mov.b32 A, %u;",
    "fma.rn.f32": "fma.rn.f32 A, A, A, 0f3F000000;",
}
UNROLL = 4


def ptx(name):
    body = []
    for rep in range(UNROLL):
        for c in range(8):
            op = OPS[name]
            if op is None:
                op = OPS["tanh.approx.f32" if c % 2 else "ex2.approx.ftz.f32"]
            body.append("    " + op.replace("A", f"%a{c}"))
    init = "\n".join(f"    add.f32 %a{c}, %f0, 0f3A83126F;" if c == 0 else
                     f"    add.f32 %a{c}, %a{c - 1}, 0f3A83126F;" for c in range(8))
    return f""".version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 iters) {{
    .reg .f32 %a<8>;
    .reg .f32 %f<2>;
    .reg .b32 %r<6>;
    .reg .b32 %u;
    .reg .pred %p;
    .reg .b64 %rd<3>;
    mov.u32 %r1, %tid.x;
    cvt.rn.f32.u32 %f0, %r1;
    mul.f32 %f0, %f0, 0f3A83126F;
{init}
    ld.param.u32 %r2, [iters];
    mov.u32 %r3, 0;
LOOP:
{chr(10).join(body)}
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p, %r3, %r2;
    @%p bra LOOP;
    add.f32 %f1, %a0, %a1;
    add.f32 %f1, %f1, %a2;
    add.f32 %f1, %f1, %a3;
    add.f32 %f1, %f1, %a4;
    add.f32 %f1, %f1, %a5;
    add.f32 %f1, %f1, %a6;
    add.f32 %f1, %f1, %a7;
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ntid.x;
    mad.lo.u32 %r4, %r4, %r5, %r1;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r4, 4;
    add.u64 %rd1, %rd1, %rd2;
    st.global.f32 [%rd1], %f1;
    ret;
}}
"""


def clock_mhz():
    q = ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"]
    return float(subprocess.check_output(q).split()[0])


def main():
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads, iters = sms * 8, 256, 1024
    out = cp.empty(blocks * threads, dtype=cp.float32)
    base = None
    for name in OPS:
        path = os.path.join(tempfile.mkdtemp(), "k.ptx")
        with open(path, "w") as f:
            f.write(ptx(name))
        k = cp.RawModule(path=path).get_function("k")
        k((blocks,), (threads,), (out, cp.uint32(iters)))
        cp.cuda.Device().synchronize()
        times, clocks = [], []
        for _ in range(5):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            k((blocks,), (threads,), (out, cp.uint32(iters)))
            e1.record()
            clocks.append(clock_mhz())
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
        t, mhz = statistics.median(times), statistics.median(clocks)
        ops = blocks * threads * iters * 8 * UNROLL * (2 if "f16x2" in name else 1)
        rate = ops / (t * sms * mhz * 1e6)
        base = base or rate
        print(f"{name:30} {t * 1e3:8.3f} ms  {rate:7.2f} per clock per SM  "
              f"({rate / base:.2f}x ex2; SM clock {mhz:.0f} MHz)")


if __name__ == "__main__":
    main()
