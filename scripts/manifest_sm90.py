#!/usr/bin/env python3
"""Launches flash-ptx's sm_90a (Hopper) forward kernels from manifest.json alone and
compares o and lse with a float64 reference (PyTorch's scaled_dot_product_attention for o,
logsumexp of the scores for lse).

Usage:
    flash-codegen emit --all --arch sm90a --out-dir ptx-sm90a   # or plain `emit --all`
    python3 scripts/manifest_sm90.py ptx-sm90a

Needs an H100 or H200 (compute capability 9.0: elsewhere it prints a NOTICE and exits 0),
PyTorch, and the NVIDIA driver's libcuda.so.1 (CUDA 12.0+); no Rust, no cuda-python, no
CuPy: the driver API is called through ctypes. Everything about a kernel comes from
PTX_DIR/manifest.json (format 3, section `sm90a`): which entry serves a problem (variant:
dtype, head_dim, mask), its file and entry name, its parameters (order, names, types,
sizes), the tensor maps (cuTensorMapEncodeTiled's arguments, with global_dim and
global_strides as formulas evaluated here), its block, its grid formula, its dynamic
shared memory and the opt-in.

Per case: o and lse start as NaN inside guard bands of a sentinel that must survive (o's
padding columns too, in the strided case); one line with the rel-L2 of o and lse against
the float64 reference (and, as a yardstick, SDPA in the kernel's dtype against it). Exits
non-zero on any failure.
"""
import ast
import ctypes
import json
import math
import os
import sys
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_uint, c_uint32, c_uint64, c_void_p
from fractions import Fraction

import torch
import torch.nn.functional as F

LOG2E = 1.4426950408889634
GUARD = 4096  # elements of guard band on each side of o and lse
SENTINEL = 12345.0
TOL_O = {"f16": 2e-3, "bf16": 1.2e-2}  # rel-L2 of o against float64
TOL_LSE = 1e-4  # rel-L2 of lse against float64 (finite rows)
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
MAP_DTYPE = {"CU_TENSOR_MAP_DATA_TYPE_FLOAT16": torch.float16,
             "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16": torch.bfloat16}
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6

CUresult = c_int
CUdevice = c_int
CUcontext = CUmodule = CUfunction = CUstream = c_void_p
cuuint32_t, cuuint64_t = c_uint32, c_uint64


class TensorMap:
    """A CUtensorMap: 128 opaque bytes, 64-byte aligned (ctypes aligns to 16 at most: a
    192-byte buffer and the 64-byte aligned address inside it)."""
    SIZE, ALIGN = 128, 64

    def __init__(self):
        self._buf = ctypes.create_string_buffer(self.SIZE + self.ALIGN)
        self.addr = (ctypes.addressof(self._buf) + self.ALIGN - 1) & ~(self.ALIGN - 1)


class Driver:
    """The few driver API calls this needs, on libcuda.so.1, in PyTorch's context."""

    def __init__(self, device):
        lib = self.lib = ctypes.CDLL("libcuda.so.1")
        sig = {
            "cuGetErrorName": [CUresult, POINTER(c_char_p)],
            "cuInit": [c_uint],
            "cuDeviceGet": [POINTER(CUdevice), c_int],
            "cuDeviceGetAttribute": [POINTER(c_int), c_int, CUdevice],
            "cuDevicePrimaryCtxRetain": [POINTER(CUcontext), CUdevice],
            "cuCtxSetCurrent": [CUcontext],
            "cuModuleLoadDataEx": [POINTER(CUmodule), c_void_p, c_uint, POINTER(c_int), POINTER(c_void_p)],
            "cuModuleGetFunction": [POINTER(CUfunction), CUmodule, c_char_p],
            "cuFuncSetAttribute": [CUfunction, c_int, c_int],
            # CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap,
            #     CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,
            #     const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
            #     const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
            #     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
            #     CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
            # (the enums are C enums: int)
            "cuTensorMapEncodeTiled": [c_void_p, c_int, cuuint32_t, c_void_p,
                                       POINTER(cuuint64_t), POINTER(cuuint64_t),
                                       POINTER(cuuint32_t), POINTER(cuuint32_t),
                                       c_int, c_int, c_int, c_int],
            # CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ,
            #     unsigned blockDimX, blockDimY, blockDimZ, unsigned sharedMemBytes,
            #     CUstream hStream, void** kernelParams, void** extra)
            "cuLaunchKernel": [CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
                               CUstream, POINTER(c_void_p), POINTER(c_void_p)],
        }
        for name, args in sig.items():
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = CUresult
        # PyTorch's context is the device's primary context: make it current here too.
        torch.zeros(1, device="cuda")
        self.check(lib.cuInit(0), "cuInit")
        dev, ctx = CUdevice(), CUcontext()
        self.check(lib.cuDeviceGet(byref(dev), device), "cuDeviceGet")
        self.check(lib.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.ctx = ctx
        sms = c_int()
        rc = lib.cuDeviceGetAttribute(byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
        self.check(rc, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)")
        self.multiprocessors = sms.value

    def check(self, rc, what, log=None):
        if rc != 0:
            name = c_char_p()
            self.lib.cuGetErrorName(rc, byref(name))
            extra = f"\n{log}" if log else ""
            raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else rc}{extra}")

    def function(self, path, name):
        """cuModuleLoadDataEx on the PTX file (the driver JIT-compiles it), then the entry."""
        with open(path, "rb") as f:
            image = ctypes.create_string_buffer(f.read())  # NUL-terminated
        log = ctypes.create_string_buffer(1 << 16)
        opts = (c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        vals = (c_void_p * 2)(ctypes.cast(log, c_void_p).value, len(log))
        mod, fn = CUmodule(), CUfunction()
        rc = self.lib.cuModuleLoadDataEx(byref(mod), ctypes.cast(image, c_void_p), 2, opts, vals)
        self.check(rc, f"cuModuleLoadDataEx({os.path.basename(path)})", log.value.decode(errors="replace"))
        self.check(self.lib.cuModuleGetFunction(byref(fn), mod, name.encode()), f"cuModuleGetFunction({name})")
        return fn

    def encode(self, m, addr, dims, strides):
        """The CUtensorMap of tensor_maps entry `m` for the tensor at `addr`."""
        rank = m["rank"]
        box, es = m["box_dim"], m["element_strides"]
        assert len(dims) == len(box) == len(es) == rank and len(strides) == rank - 1, m
        tm = TensorMap()
        rc = self.lib.cuTensorMapEncodeTiled(
            c_void_p(tm.addr), m["data_type"]["value"], rank, c_void_p(addr),
            (cuuint64_t * rank)(*dims), (cuuint64_t * (rank - 1))(*strides),
            (cuuint32_t * rank)(*box), (cuuint32_t * rank)(*es),
            m["interleave"]["value"], m["swizzle"]["value"],
            m["l2_promotion"]["value"], m["oob_fill"]["value"])
        self.check(rc, f"cuTensorMapEncodeTiled({m['param']}: dims {dims}, strides {strides}, box {box})")
        return tm

    def launch(self, fn, grid, block, smem, args):
        """cuLaunchKernel on PyTorch's current stream; `args` in parameter order, each a
        ctypes scalar or a TensorMap (kernelParams holds a pointer to each one's bytes)."""
        ptrs = (c_void_p * len(args))(*[a.addr if isinstance(a, TensorMap) else ctypes.addressof(a)
                                         for a in args])
        stream = c_void_p(torch.cuda.current_stream().cuda_stream)
        rc = self.lib.cuLaunchKernel(fn, *grid, *block, smem, stream, ptrs, None)
        self.check(rc, f"cuLaunchKernel(grid {grid}, block {block}, smem {smem})")


def evaluate(formula, names):
    """A manifest formula such as `ceil(seqlen_q / block_m)` or `2 * q_row_stride`: names,
    integers, + - * / <<, ceil(), min(a, b)."""
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Name):
            return Fraction(names[n.id])
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return Fraction(n.value)
        if isinstance(n, ast.BinOp) and type(n.op) in OPS:
            return OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "ceil" and len(n.args) == 1:
            return Fraction(math.ceil(ev(n.args[0])))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "min" and len(n.args) == 2:
            return min(ev(n.args[0]), ev(n.args[1]))
        raise ValueError(f"unsupported formula `{formula}`")
    v = ev(ast.parse(formula, mode="eval"))
    if v.denominator != 1:
        raise ValueError(f"`{formula}` is not an integer: {v}")
    return int(v)


OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
       ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
       ast.LShift: lambda a, b: Fraction(int(a) << int(b))}
CTYPE = {"uint64": c_uint64, "uint32": c_uint32, "float32": c_float}


class Manifest:
    def __init__(self, ptx_dir, drv):
        self.dir, self.drv = ptx_dir, drv
        with open(os.path.join(ptx_dir, "manifest.json")) as f:
            man = json.load(f)
        if man.get("format") != 3:
            raise SystemExit(f"manifest.json has format {man.get('format')}; this script reads format 3")
        self.kernels = man["sm90a"]["kernels"]
        if not self.kernels:
            raise SystemExit("manifest.json lists no sm90a kernels (emit --all, or --arch sm90a)")
        self.fns = {}

    def pick(self, d, dtype, causal, window=None, scores="plain"):
        """notes: the entry whose variant has the problem's dtype, head_dim, mask and
        scores."""
        mask = "local" if window is not None else "causal" if causal else "none"
        want = dict(head_dim=d, dtype=dtype, mask=mask, scores=scores)
        fits = [k for k in self.kernels if all(k["variant"][f] == v for f, v in want.items())]
        if len(fits) != 1:
            raise SystemExit(f"{len(fits)} sm90a kernels for {want} in the manifest")
        return fits[0]

    def function(self, k):
        if k["name"] not in self.fns:
            fn = self.drv.function(os.path.join(self.dir, k["file"]), k["name"])
            if k["launch"]["needs_smem_opt_in"]:
                rc = self.drv.lib.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                     k["launch"]["dynamic_smem_bytes"])
                self.drv.check(rc, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
            self.fns[k["name"]] = fn
        return self.fns[k["name"]]

    def launch(self, k, tensors, sizes, scalars):
        """The tensor maps of q, k, v (and o for a TMA-epilogue kernel, `_tst`), then every
        parameter by name, then the launch."""
        run, maps = self.prepare(k, tensors, sizes, scalars)
        run()
        return maps  # keep them alive until the launch has been enqueued

    def prepare(self, k, tensors, sizes, scalars):
        """The launch of `k` on these tensors and scalars, its tensor maps encoded once:
        (a function that enqueues it, the maps and arguments it holds)."""
        names = dict(sizes, **k["tiles"], multiprocessors=self.drv.multiprocessors)
        for t in tensors:  # q, k, v, o: each map's strides are named after its tensor
            for dim, suffix in enumerate(("batch_stride", "row_stride", "head_stride")):
                names[f"{t}_{suffix}"] = tensors[t].stride(dim)
        maps = {}
        for m in k["tensor_maps"]:
            t = tensors[m["tensor"]]
            assert MAP_DTYPE[m["data_type"]["name"]] == t.dtype, (m["data_type"], t.dtype)
            assert t.stride(3) == 1, "head_dim must be contiguous"
            dims = [evaluate(f, names) for f in m["global_dim"]]
            strides = [evaluate(f, names) for f in m["global_strides"]]

            def valid(s):
                return s > 0 and s % m["global_strides_multiple"] == 0 and s < m["global_strides_below"]
            # notes: a dimension of extent 1 is never stepped over: any valid stride will do
            strides = [s if valid(s) or dims[i + 1] != 1 else dims[0] * t.element_size()
                       for i, s in enumerate(strides)]
            if t.data_ptr() % m["global_address_align"] or not all(map(valid, strides)):
                raise SystemExit(f"{m['tensor']}: address {t.data_ptr():#x} or strides {strides} break the map's limits")
            maps[m["param"]] = self.drv.encode(m, t.data_ptr(), dims, strides)
        args = []
        for p in sorted(k["params"], key=lambda p: p["index"]):
            if p["type"] == "b8[128]":
                assert p["size"] == TensorMap.SIZE and p["align"] == TensorMap.ALIGN, p
                args.append(maps[p["name"]])
            elif p["name"] in scalars:
                ct = CTYPE[p["numpy"]]
                assert ctypes.sizeof(ct) == p["size"], p
                args.append(ct(scalars[p["name"]]))
            else:
                raise SystemExit(f"the manifest names a parameter this script does not know: `{p['name']}`")
        grid = tuple(evaluate(g, names) for g in k["launch"]["grid"])
        fn, block, smem = self.function(k), tuple(k["launch"]["block"]), k["launch"]["dynamic_smem_bytes"]
        return (lambda: self.drv.launch(fn, grid, block, smem, args)), (maps, args)


def guarded(shape, dtype, pad=0):
    """A NaN tensor of `shape` (last dim padded by `pad` sentinel columns) inside guard
    bands of the sentinel: (flat buffer, padded view, the view the kernel writes)."""
    *outer, d = shape
    n = math.prod(outer) * (d + pad)
    full = torch.full((n + 2 * GUARD,), SENTINEL, device="cuda", dtype=dtype)
    padded = full[GUARD:GUARD + n].view(*outer, d + pad)
    view = padded[..., :d]
    view.fill_(float("nan"))
    return full, padded, view


def untouched(full, padded, d):
    g = torch.cat([full[:GUARD], full[-GUARD:], padded[..., d:].reshape(-1)])
    return bool((g == SENTINEL).all().item())


def reference(q, k, v, causal, scale, dtype, window=None):
    """o ([b, sq, h, d]) by SDPA on [b, h, s, d] in `dtype` with the bottom-right causal mask
    or the sliding window (left, right; -1 unbounded) as a boolean attn_mask (rows without
    keys: 0), and lse ([b, h, sq], natural log, -inf for rows without keys) from the
    scores."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qd = q.to(dtype).transpose(1, 2)
    kd = k.to(dtype).transpose(1, 2).repeat_interleave(h // hk, dim=1)
    vd = v.to(dtype).transpose(1, 2).repeat_interleave(h // hk, dim=1)
    mask = None
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    if causal:
        mask = j <= i + (sk - sq)
    if window is not None:
        left, right = window
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
        if left >= 0:
            mask &= j >= i + (sk - sq) - left
        if right >= 0:
            mask &= j <= i + (sk - sq) + right
    # (a row without keys is NaN here; replaced by 0 below)
    o = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask, scale=scale)
    s = (qd.double() @ kd.double().transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.where(torch.isneginf(lse)[..., None], torch.zeros_like(o), o)
    return o.transpose(1, 2), lse


def guarded_counter():
    """A dynamic kernel's tile counter (u32[2], zeroed; the kernel leaves it zeroed), with
    guard words either side: (the whole buffer, the counter)."""
    full = torch.full((6,), 0x5A5A5A5A, device="cuda", dtype=torch.int32)
    counter = full[2:4]
    counter.zero_()
    return full, counter


def counter_intact(full):
    """The counter left zeroed (the next launch may reuse it), its guard words intact."""
    want = torch.tensor([0x5A5A5A5A] * 2 + [0, 0] + [0x5A5A5A5A] * 2, dtype=torch.int32)
    return bool((full.cpu() == want).all().item())


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def case(man, b, sq, sk, h, hk, d, dt, causal, layout="contiguous", with_lse=True, window=None):
    """One launch: `layout` contiguous, or `packed` (q, k, v views of one [b, s, 3, h, d]
    buffer, o with 8 padding columns per row); `window` (left, right; -1 unbounded): the
    sliding window's kernel."""
    dtype = TORCH[dt]
    kern = man.pick(d, dt, causal, window)
    if layout == "packed":
        assert sq == sk and h == hk
        qkv = torch.randn(b, sq, 3, h, d, device="cuda", dtype=dtype)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        pad = 8
    else:
        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
        pad = 0
    o_full, o_pad, o = guarded((b, sq, h, d), dtype, pad)
    l_full, l_pad, lse = guarded((b, h, sq), torch.float32)
    scale = 1.0 / math.sqrt(d)
    sizes = dict(batch=b, seqlen_q=sq, seqlen_k=sk, heads=h, heads_k=hk, head_dim=d)
    counter_full, counter = guarded_counter()
    scalars = dict(o=o.data_ptr(), lse=lse.data_ptr() if with_lse else 0, seqlen_q=sq, seqlen_k=sk,
                   group=h // hk, heads=h, o_row=o.stride(1), o_head=o.stride(2), o_batch=o.stride(0),
                   scale_log2=scale * LOG2E, batch=b, tile_counter=counter.data_ptr())
    if window is not None:
        scalars.update(window_left=window[0] & 0xFFFFFFFF, window_right=window[1] & 0xFFFFFFFF)
    maps = man.launch(kern, dict(q=q, k=k, v=v, o=o), sizes, scalars)
    torch.cuda.synchronize()
    del maps
    ref_o, ref_lse = reference(q, k, v, causal, scale, torch.float64, window)
    same_o, _ = reference(q, k, v, causal, scale, dtype, window)
    r_o, r_same = rel_l2(o, ref_o), rel_l2(same_o, ref_o)
    ok = math.isfinite(r_o) and r_o <= TOL_O[dt] and untouched(o_full, o_pad, d)
    lse_msg = "lse skipped"
    if with_lse:
        empty = torch.isneginf(ref_lse)
        same_empty = bool((torch.isneginf(lse) == empty).all().item())
        fin = ~empty
        r_l = rel_l2(lse[fin], ref_lse[fin]) if fin.any() else 0.0
        ok &= math.isfinite(r_l) and r_l <= TOL_LSE and same_empty and untouched(l_full, l_pad, sq)
        lse_msg = f"lse rel-L2 {r_l:.2e}{'' if same_empty else ' (-inf rows differ)'}"
    else:
        ok &= bool(torch.isnan(lse).all().item()) and untouched(l_full, l_pad, sq)
    counter_ok = counter_intact(counter_full)
    ok &= counter_ok
    guards = "" if untouched(o_full, o_pad, d) else " (o written outside its elements)"
    guards += "" if counter_ok else f" (tile_counter left {counter_full.tolist()})"
    win = "" if window is None else f" window {window}"
    print(f"{'ok  ' if ok else 'FAIL'} {kern['name']:44} b{b} sq{sq} sk{sk} h{h}/{hk}{win} {layout}: "
          f"o rel-L2 {r_o:.2e} (SDPA {dt} {r_same:.2e}), {lse_msg}{guards}", flush=True)
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    ptx_dir = sys.argv[1]
    with open(os.path.join(ptx_dir, "manifest.json")) as f:
        ccs = {(k["min_compute_capability"], k["max_compute_capability"])
               for k in json.load(f).get("sm90a", {}).get("kernels", [])}
    if not torch.cuda.is_available():
        print("NOTICE: no CUDA GPU: the sm_90a kernels were not launched")
        return 0
    cc = "%d.%d" % torch.cuda.get_device_capability()
    if cc != "9.0" or any(not (tuple(map(int, lo.split("."))) <= tuple(map(int, cc.split(".")))
                               <= tuple(map(int, hi.split(".")))) for lo, hi in ccs):
        print(f"NOTICE: compute capability {cc}: the sm_90a kernels run on 9.0 only; nothing launched")
        return 0
    man = Manifest(ptx_dir, Driver(torch.cuda.current_device()))
    torch.manual_seed(0)
    # every plain kernel, odd seqlen (the window's: 200 keys before the diagonal, 0 after;
    # the softcap and ALiBi kernels: scripts/manifest_sm90_scores.py)
    cases = [(2, 1000, 1000, 4, 4, k["variant"]["head_dim"], k["variant"]["dtype"],
              k["variant"]["mask"] == "causal", "contiguous", True,
              (200, 0) if k["variant"]["mask"] == "local" else None)
             for k in man.kernels if k["variant"]["scores"] == "plain"]
    cases += [
        (1, 300, 1000, 4, 4, 128, "bf16", True),   # causal, sq < sk (bottom-right)
        (1, 1000, 300, 4, 4, 64, "f16", True),     # causal, sq > sk: rows without keys
        (2, 777, 777, 8, 2, 64, "bf16", True),     # GQA 4:1
        (1, 513, 1031, 8, 1, 128, "f16", False),   # MQA, sq != sk
        (3, 1, 1, 4, 4, 128, "bf16", False),       # one query, one key
    ]
    if any(k["variant"]["mask"] == "local" for k in man.kernels):
        cases += [
            (1, 700, 900, 4, 2, 64, "bf16", False, "contiguous", True, (128, 300)),
            (1, 900, 300, 2, 2, 128, "f16", False, "contiguous", True, (50, 20)),  # rows without keys
            (2, 513, 513, 4, 4, 128, "bf16", False, "contiguous", True, (-1, 64)),
        ]
    ok = True
    for c in cases:
        ok &= case(man, *c)
    ok &= case(man, 2, 640, 640, 4, 4, 128, "f16", True, layout="packed")
    ok &= case(man, 2, 640, 640, 4, 4, 64, "bf16", False, layout="packed")
    ok &= case(man, 1, 257, 300, 2, 2, 64, "bf16", False, with_lse=False)
    print("ALL OK" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
