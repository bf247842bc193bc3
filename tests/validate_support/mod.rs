//! What the validate-layer tests (tests/runtime_errors_*.rs) share: contiguous bf16
//! tensor descriptors and a backward's arguments at distinct aligned pointers.
#![allow(dead_code)] // each test file uses its own subset

use flash_codegen::DType;
use flash_runtime::validate::{
    AlibiDesc, BufDesc, BwdArgs, FwdArgs, ScratchDesc, TensorDesc, VarlenDesc,
};
use flash_runtime::{AttnParams, BwdOptions, tensor::contiguous_strides};

/// A contiguous bf16 tensor of `shape` at `ptr`, exactly sized.
pub fn t(shape: [usize; 4], ptr: u64) -> TensorDesc {
    TensorDesc {
        shape,
        strides: contiguous_strides(shape),
        ptr,
        len: shape.iter().product(),
        dtype: DType::Bf16,
    }
}

/// A backward's arguments: q, o, dO, dq of shape `qs`, k, v, dk, dv of `ks`, contiguous at
/// distinct aligned pointers, an lse of `lse_len` values, and `scratch`.
pub fn bwd_args(
    (qs, ks): ([usize; 4], [usize; 4]),
    lse_len: usize,
    scratch: Option<ScratchDesc>,
    (params, opts): (AttnParams<'static>, BwdOptions),
) -> BwdArgs<'static> {
    BwdArgs {
        q: t(qs, 0x1000_0000),
        k: t(ks, 0x2000_0000),
        v: t(ks, 0x3000_0000),
        o: t(qs, 0x4000_0000),
        d_o: t(qs, 0x5000_0000),
        dq: t(qs, 0x6000_0000),
        dk: t(ks, 0x7000_0000),
        dv: t(ks, 0x8000_0000),
        lse: BufDesc {
            ptr: 0x9000_0000,
            len: lse_len,
        },
        scratch,
        params,
        alibi: None,
        opts,
    }
}

/// Where [`atomic_bwd_args`] puts the dvec and dq_accum scratch.
pub const DVEC: u64 = 0xa000_0000;
pub const ACC: u64 = 0xb000_0000;

/// A backward's arguments in atomic mode (plain parameters): q `[b, sq, h, d]`, k
/// `[b, sk, hk, d]`, contiguous, with exactly sized lse, dvec and dq_accum scratch.
pub fn atomic_bwd_args(
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    d: usize,
) -> BwdArgs<'static> {
    let scratch = ScratchDesc {
        dvec: BufDesc {
            ptr: DVEC,
            len: b * h * sq,
        },
        dq_accum: Some(BufDesc {
            ptr: ACC,
            len: b * sq.div_ceil(16) * 16 * h * d,
        }),
        dkv_partial: None,
    };
    let modes = (AttnParams::new(), BwdOptions::new());
    bwd_args(
        ([b, sq, h, d], [b, sk, hk, d]),
        b * h * sq,
        Some(scratch),
        modes,
    )
}

/// A forward's arguments: `b` x 8 query heads over 2 kv heads, d128, sq queries over sk
/// keys, an lse, `params` and ALiBi's `alibi`.
pub fn fwd_args(
    (b, sq, sk): (usize, usize, usize),
    params: AttnParams<'static>,
    alibi: Option<AlibiDesc>,
) -> FwdArgs<'static> {
    FwdArgs {
        q: t([b, sq, 8, 128], 0x1000_0000),
        k: t([b, sk, 2, 128], 0x2000_0000),
        v: t([b, sk, 2, 128], 0x3000_0000),
        o: t([b, sq, 8, 128], 0x4000_0000),
        lse: Some(BufDesc {
            ptr: 0x5000_0000,
            len: b * 8 * sq,
        }),
        params,
        alibi,
    }
}

/// A packed batch of two sequences (offsets `[3]` at distinct pointers), each at most 200
/// queries and 200 keys.
pub fn two_sequences() -> VarlenDesc {
    VarlenDesc {
        cu_seqlens_q: BufDesc {
            ptr: 0xd000_0000,
            len: 3,
        },
        cu_seqlens_k: BufDesc {
            ptr: 0xe000_0000,
            len: 3,
        },
        max_seqlen_q: 200,
        max_seqlen_k: 200,
    }
}
