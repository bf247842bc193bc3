//! Helpers of the KV-cache forward's CPU tests (`tests/runtime_errors_kvcache.rs`): plain
//! argument descriptions, the checks every planned launch must pass, and the fixtures of
//! the shape, stride and alignment errors.
#![allow(dead_code)]

use flash_codegen::abi::params;
use flash_codegen::{Arch, DType, KernelSpec, Mask as KMask, Pass, Tiling, Tuning};
use flash_runtime::validate::{BufDesc, GpuFill, KvArgs, LaunchPlan, TensorDesc, plan_kvcache};
use flash_runtime::{AttnParams, FlashError, KvPlan, tensor::contiguous_strides};

/// The element type of every tensor here.
pub const BF: DType = DType::Bf16;
/// Where [`args`] puts seqlens_k.
pub const SEQLENS: u64 = 0x9000_0000;
/// An H100/H200: 132 SMs, 227 KiB of shared memory per block.
pub const H200: GpuFill = GpuFill {
    sms: 132,
    smem_optin: 227 * 1024,
    smem_per_sm: 228 * 1024,
};

/// A contiguous tensor of `shape` at `ptr`, its buffer exactly its size.
pub fn t(shape: [usize; 4], ptr: u64) -> TensorDesc {
    TensorDesc {
        shape,
        strides: contiguous_strides(shape),
        ptr,
        len: shape.iter().product(),
        dtype: BF,
    }
}

/// A plain f32/i32 device buffer.
pub fn buf(ptr: u64, len: usize) -> BufDesc {
    BufDesc { ptr, len }
}

/// q [b, sq, h, d], caches [b, cap, hk, d], contiguous at distinct aligned pointers, a
/// seqlens_k of b i32, the split count left to the runtime.
pub fn args(b: usize, sq: usize, cap: usize, h: usize, hk: usize, d: usize) -> KvArgs<'static> {
    KvArgs {
        q: t([b, sq, h, d], 0x1000_0000),
        k: t([b, cap, hk, d], 0x2000_0000),
        v: t([b, cap, hk, d], 0x3000_0000),
        o: t([b, sq, h, d], 0x4000_0000),
        lse: None,
        seqlens_k: Some(BufDesc {
            ptr: SEQLENS,
            len: b,
        }),
        params: AttnParams::new(),
        alibi: None,
        num_splits: None,
        paged: None,
    }
}

/// Plan `a` for an H100/H200.
pub fn plan(a: &KvArgs) -> Result<KvPlan, FlashError> {
    plan_kvcache(a, Arch::Sm80, H200)
}

/// The error (and its message) of planning `a`, which must fail.
pub fn err(a: &KvArgs) -> (FlashError, String) {
    let e = plan(a).expect_err("expected an error");
    let msg = e.to_string();
    (e, msg)
}

/// `a` with exactly `n` splits asked for.
pub fn with_splits(mut a: KvArgs<'static>, n: u32) -> KvArgs<'static> {
    a.num_splits = Some(n);
    a
}

/// The launch's parameters are `abi::params(pass)`, in order, each of its ABI type.
pub fn assert_follows_abi(l: &LaunchPlan) {
    let abi = params(l.spec.pass);
    assert_eq!(l.params.len(), abi.len(), "{}", l.spec);
    for ((name, v), desc) in l.params.iter().zip(abi) {
        assert_eq!(*name, desc.name, "{}", l.spec);
        assert!(v.fits(desc.ty), "{name}: {v:?} for {:?}", desc.ty);
        assert_eq!(v.ty(), desc.ty.name(), "{name}");
    }
    assert_eq!(l.block, [l.spec.tiles().threads(), 1, 1]);
    assert_eq!(l.smem_bytes, l.spec.smem_bytes());
}

/// The fwdsplit kernel of kernel head dim `d`.
pub fn split_spec(d: u32, mask: KMask) -> KernelSpec {
    KernelSpec {
        pass: Pass::FwdSplit,
        head_dim: d,
        dtype: BF,
        mask,
        scores: flash_codegen::Scores::Plain,
        tiling: Tiling::Standard,
        arch: Arch::Sm80,
    }
}

/// CTAs resident at once on `gpu` for the fwdsplit kernel of head dim `d`.
pub fn slots(d: u32, gpu: GpuFill) -> u64 {
    let ctas = split_spec(d, KMask::None)
        .plan(&Tuning::NONE)
        .ctas_per_sm_hint();
    u64::from(gpu.sms) * u64::from(ctas)
}

/// Arguments that must fail with `FlashError::ShapeMismatch`, each with a piece of its
/// message (`shape_mismatches`).
pub fn shape_mismatch_cases() -> Vec<(KvArgs<'static>, &'static str)> {
    let mut cases = Vec::new();
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.v = t([1, 65, 2, 64], 0x3000_0000);
    cases.push((a, "v_cache has shape"));
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.o = t([1, 2, 2, 64], 0x4000_0000);
    cases.push((a, "o has shape"));
    let mut a = args(2, 1, 64, 2, 2, 64);
    (a.k, a.v) = (
        t([1, 64, 2, 64], 0x2000_0000),
        t([1, 64, 2, 64], 0x3000_0000),
    );
    cases.push((a, "batch"));
    let mut a = args(1, 1, 64, 2, 2, 64);
    (a.k, a.v) = (
        t([1, 64, 2, 32], 0x2000_0000),
        t([1, 64, 2, 32], 0x3000_0000),
    );
    cases.push((a, "head_dim"));
    let mut a = args(1, 4, 64, 2, 2, 64);
    a.q.len -= 1;
    cases.push((a, "device buffer holds"));
    let mut a = args(1, 4, 64, 2, 2, 64);
    a.lse = Some(buf(0x5000_0000, 7));
    cases.push((a, "lse must hold"));
    let mut a = args(3, 1, 64, 2, 2, 64);
    a.seqlens_k = Some(buf(SEQLENS, 2));
    cases.push((a, "seqlens_k must hold batch = 3 i32"));
    // 2^31 keys: past what the kernels index (seqlens_k is i32)
    cases.push((args(1, 1, 1 << 31, 2, 2, 64), "capacity 2147483648"));
    cases
}

/// Arguments that must fail with `FlashError::StrideMismatch` on the named tensor, each
/// with a piece of its message (`stride_mismatches`).
pub fn stride_mismatch_cases() -> Vec<(KvArgs<'static>, &'static str, &'static str)> {
    let mut cases = Vec::new();
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.k.strides[3] = 2;
    a.k.len *= 2;
    cases.push((a, "k_cache", "contiguous (stride 1)"));
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.v.strides[1] = 1 << 33;
    a.v.len = usize::MAX;
    cases.push((a, "v_cache", "fit in u32"));
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.o.strides[2] = 0; // both heads write the same memory
    cases.push((a, "o", "share memory"));
    cases
}

/// Arguments that must fail with `FlashError::Misaligned` on the named tensor, each with a
/// piece of its message (`misaligned_pointers_and_strides`).
pub fn misaligned_cases() -> Vec<(KvArgs<'static>, &'static str, &'static str)> {
    let mut cases = Vec::new();
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.q.ptr += 2;
    cases.push((a, "q", "16-byte aligned"));
    let mut a = args(2, 1, 64, 2, 2, 64);
    a.v.strides[0] += 2;
    a.v.len += 2;
    cases.push((a, "v_cache", "batch stride"));
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.lse = Some(buf(0x5000_0002, 2));
    cases.push((a, "lse", "4-byte aligned"));
    for ptr in [SEQLENS + 2, 0] {
        let mut a = args(1, 1, 64, 2, 2, 64);
        a.seqlens_k = Some(buf(ptr, 1));
        cases.push((a, "seqlens_k", "null or not 4-byte aligned"));
    }
    cases
}
