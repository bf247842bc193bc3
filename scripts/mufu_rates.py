"""Throughput of the multi-function unit's ops on this GPU (CuPy, no Rust): each kernel
runs 8 independent chains of one op per thread, 132 x 8 CTAs of 256 threads; the clock
rate of each op per SM partition, from CUDA events and the SM clock (nvidia-smi's max).

    python3 scripts/mufu_rates.py [SM_MHZ]
"""
import sys
import cupy as cp

OPS = {
    "ex2.approx.ftz.f32": "ex2.approx.ftz.f32 %0, %0;",
    "tanh.approx.f32": "tanh.approx.f32 %0, %0;",
    "rcp.approx.ftz.f32": "rcp.approx.ftz.f32 %0, %0;",
    "lg2.approx.ftz.f32": "lg2.approx.ftz.f32 %0, %0;",
    "fma.rn.f32 (FMA pipe)": "fma.rn.f32 %0, %0, 0f3F7FFFFF, 0f3A83126F;",
}
ITERS = 4096
SRC = r"""
extern "C" __global__ void k(float* out, float seed) {
    float a0 = seed + threadIdx.x * 1e-6f, a1 = a0 + 0.1f, a2 = a0 + 0.2f, a3 = a0 + 0.3f;
    float a4 = a0 + 0.4f, a5 = a0 + 0.5f, a6 = a0 + 0.6f, a7 = a0 + 0.7f;
    for (int i = 0; i < ITERS; ++i) {
        asm volatile("OP" : "+f"(a0)); asm volatile("OP" : "+f"(a1));
        asm volatile("OP" : "+f"(a2)); asm volatile("OP" : "+f"(a3));
        asm volatile("OP" : "+f"(a4)); asm volatile("OP" : "+f"(a5));
        asm volatile("OP" : "+f"(a6)); asm volatile("OP" : "+f"(a7));
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""
mhz = float(sys.argv[1]) if len(sys.argv) > 1 else 1980.0
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
blocks, threads = sms * 8, 256
out = cp.zeros(blocks * threads, cp.float32)
for name, op in OPS.items():
    kern = cp.RawKernel(SRC.replace("OP", op).replace("ITERS", str(ITERS)), "k")
    kern((blocks,), (threads,), (out, cp.float32(0.3)))
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(5):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(); kern((blocks,), (threads,), (out, cp.float32(0.3))); e.record()
        e.synchronize(); times.append(cp.cuda.get_elapsed_time(s, e))
    ms = sorted(times)[2]
    warp_ops = blocks * threads / 32 * ITERS * 8
    clocks = ms * 1e-3 * mhz * 1e6
    per_smsp = warp_ops / (sms * 4) / clocks
    print(f"{name:24s} {ms:8.3f} ms  {1 / per_smsp:6.2f} clocks per warp instruction per SM partition")
