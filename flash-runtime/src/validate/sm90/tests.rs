//! The sm_90a forward's rule: each refusal's reason, and what it accepts (contiguous,
//! PyTorch-layout, packed-qkv and size-1-dim views, the normalised windows, a custom
//! scale), with the launch values it gives.

use flash_codegen::{Arch, DType};

use super::*;
use crate::params::AttnParams;
use crate::tensor::{bhsd_layout, contiguous_strides};
use crate::validate::{LseDesc, plan_fwd_on};

mod modifiers;

pub(super) const H100: Sm90Runtime = Sm90Runtime {
    cc: (9, 0),
    generates: true,
    smem_optin: 227 << 10,
    tma: true,
};
pub(super) const BASE: u64 = 0x7f00_0000_0000;

/// A contiguous `[b, s, h, d]` tensor at `ptr`.
fn t(shape: [usize; 4], ptr: u64, dtype: DType) -> TensorDesc {
    TensorDesc {
        shape,
        strides: contiguous_strides(shape),
        ptr,
        len: shape.iter().product(),
        dtype,
    }
}

/// A call of b 2, sq 300, sk 500, heads 8 / 2, head dim `d`, contiguous, no mask.
fn args(d: usize, dtype: DType) -> FwdArgs<'static> {
    FwdArgs {
        q: t([2, 300, 8, d], BASE, dtype),
        k: t([2, 500, 2, d], BASE + (1 << 30), dtype),
        v: t([2, 500, 2, d], BASE + (2 << 30), dtype),
        o: t([2, 300, 8, d], BASE + (3 << 30), dtype),
        lse: None,
        params: AttnParams::new(),
        alibi: None,
    }
}

pub(super) fn bf16_128() -> FwdArgs<'static> {
    args(128, DType::Bf16)
}

/// The rule's reason for `a` on `rt` (some of these layouts the sm_80 plan rejects first:
/// the rule's own words are tested all the same).
fn refusal(a: &FwdArgs, rt: Sm90Runtime) -> String {
    match sm90_fwd_call(a, rt) {
        Ok(call) => panic!("expected a refusal, got {call:?}"),
        Err(why) => why,
    }
}

pub(super) fn assert_refuses(a: &FwdArgs, rt: Sm90Runtime, want: &str) {
    let why = refusal(a, rt);
    assert!(why.contains(want), "reason `{why}` lacks `{want}`");
}

#[test]
fn a_contiguous_call_runs_with_the_plans_values() {
    let mut a = bf16_128();
    a.params = AttnParams::causal();
    a.lse = Some(LseDesc {
        ptr: BASE + (4 << 30),
        len: 2 * 8 * 300,
    });
    let call = sm90_fwd_call(&a, H100).expect("eligible");
    assert_eq!(
        call.variant.name(),
        "fa3_fwd_d128_bf16_causal_ovl_pp_m128_dyn_tst_sm90a"
    );
    let sh = call.shape;
    assert_eq!(sh.sizes(), (2, 300, 500, 8, 2, 128));
    assert!(sh.causal && sh.overlap && sh.pingpong && !sh.debug && sh.consumers.is_none());
    assert_eq!(call.q.strides, [300 * 8 * 128, 8 * 128, 128]);
    assert_eq!(call.k.strides, [500 * 2 * 128, 2 * 128, 128]);
    assert_eq!(
        (call.q.ptr, call.k.ptr, call.v.ptr),
        (a.q.ptr, a.k.ptr, a.v.ptr)
    );
    let o = Sm90Out {
        ptr: a.o.ptr,
        batch: 300 * 8 * 128,
        row: 8 * 128,
        head: 128,
    };
    assert_eq!((call.o, call.lse), (o, BASE + (4 << 30)));
    // the shipping kernel writes o through its tensor map (the TMA epilogue)
    let o_tma = TmaSource {
        ptr: a.o.ptr,
        strides: call.q.strides,
    };
    assert_eq!(call.o_tma, Some(o_tma));
    // the sm_80 plan accepts it and binds the same scale
    let plan = plan_fwd_on(&a, Arch::Sm80, H100.smem_optin).unwrap();
    assert_eq!(
        plan.param("scale_log2"),
        Some(crate::validate::ParamValue::F32(call.scale_log2))
    );
}

#[test]
fn d64_takes_three_consumers_and_both_dtypes_run() {
    for dtype in DType::ALL {
        let call = sm90_fwd_call(&args(64, dtype), H100).expect("eligible");
        let want = format!("fa3_fwd_d64_{}_ovl_pp_m192_dyn_tst_sm90a", dtype.name());
        assert_eq!(call.variant.name(), want);
        assert_eq!(call.variant.consumers, 3);
    }
}

#[test]
fn strided_views_map_their_strides() {
    // q, k, v out of one packed [b, s, 3, h, d] buffer; o in PyTorch's [b, h, s, d]
    let (b, s, h, d) = (2, 300, 4, 64);
    let packed = |i: u64| TensorDesc {
        shape: [b, s, h, d],
        strides: [s * 3 * h * d, 3 * h * d, d, 1],
        ptr: BASE + i * (h * d * 2) as u64,
        len: b * s * 3 * h * d - i as usize * h * d,
        dtype: DType::F16,
    };
    let (shape, strides) = bhsd_layout([b, h, s, d]);
    let o = TensorDesc {
        strides,
        ..t(shape, BASE + (1 << 30), DType::F16)
    };
    let a = FwdArgs {
        q: packed(0),
        k: packed(1),
        v: packed(2),
        o,
        ..args(d, DType::F16)
    };
    plan_fwd_on(&a, Arch::Sm80, H100.smem_optin).expect("the sm_80 plan accepts it");
    let call = sm90_fwd_call(&a, H100).expect("eligible");
    assert_eq!(call.v.strides, [s * 3 * h * d, 3 * h * d, d]);
    assert_eq!(call.v.ptr, BASE + 2 * 512);
    let o = (call.o.batch, call.o.row, call.o.head);
    assert_eq!(o, ((h * s * d) as u64, d as u32, (s * d) as u32));
    assert_eq!(call.o_tma.map(|o| o.strides), Some([h * s * d, d, s * d]));
}

#[test]
fn a_dim_of_one_takes_a_stride_tma_accepts() {
    // batch 1, one kv head, seqlen_q 1: their strides are never stepped over (0 or odd)
    let mut a = bf16_128();
    a.q.shape = [1, 1, 8, 128];
    a.q.strides = [0, 3, 128, 1];
    a.o = t([1, 1, 8, 128], BASE + (3 << 30), DType::Bf16);
    a.k.shape = [1, 500, 1, 128];
    a.k.strides = [7, 128, 0, 1];
    a.v = a.k;
    let call = sm90_fwd_call(&a, H100).expect("eligible");
    assert_eq!(call.q.strides, [128, 128, 128]);
    assert_eq!(call.k.strides, [128, 128, 128]);
    assert_eq!((call.o.batch, call.o.row, call.o.head), (0, 0, 128));
    assert_eq!(call.o_tma.map(|o| o.strides), Some([128, 128, 128]));
}

#[test]
fn the_runtime_must_generate_on_compute_capability_9_0() {
    let embedded = Sm90Runtime {
        generates: false,
        ..H100
    };
    assert_refuses(&bf16_128(), embedded, "embedded kernels only");
    for cc in [(8, 0), (8, 9), (10, 0), (12, 0)] {
        let rt = Sm90Runtime { cc, ..H100 };
        let want = format!("compute capability {}.{}", cc.0, cc.1);
        assert_refuses(&bf16_128(), rt, &want);
    }
}

/// A driver without the tensor-map encoder (before CUDA 12.0) keeps the forward on sm_80.
#[test]
fn the_driver_must_encode_tensor_maps() {
    let old = Sm90Runtime { tma: false, ..H100 };
    assert_refuses(
        &bf16_128(),
        old,
        "this CUDA driver has no cuTensorMapEncodeTiled",
    );
}

/// An embedded-only runtime takes a call whose shipping variant is registered (what
/// `flash_kernel!`'s `arch = sm90a` embeds: the rule's variant is `Variant::shipping`) and
/// refuses one whose variant is not, naming the missing kernel and the keys to add.
#[test]
fn an_embedded_only_runtime_takes_its_registered_variants() {
    let embedded = Sm90Runtime {
        generates: false,
        ..H100
    };
    for dtype in [DType::F16, DType::Bf16] {
        for d in fwd::HEAD_DIMS {
            for causal in [false, true] {
                let mut a = args(d as usize, dtype);
                if causal {
                    a.params = AttnParams::causal();
                }
                let shipping = fwd::Variant::shipping(dtype, d, causal);
                let only = |v: &fwd::Variant| v.name() == shipping.name();
                let call = sm90_fwd_call_with(&a, embedded, &only).expect("registered");
                assert_eq!(call.variant, shipping);
                // the generating runtime picks the same variant
                assert_eq!(sm90_fwd_call(&a, H100).unwrap().variant, shipping);

                let other = fwd::Variant {
                    causal: !causal,
                    ..shipping
                };
                let not = |v: &fwd::Variant| v.name() == other.name();
                let why = sm90_fwd_call_with(&a, embedded, &not).unwrap_err();
                let want = format!(
                    "this runtime runs embedded kernels only (FlashAttention::with_kernels) \
                     and the sm_90a kernel `{}` is not among them: add `arch = [sm80, sm90a]` \
                     (or `sm90a`), `head_dim = {d}`, `dtype = {}`, `causal = {causal}` and \
                     `passes = fwd`",
                    shipping.name(),
                    dtype.name()
                );
                assert!(why.starts_with(&want), "`{why}` lacks `{want}`");
                // nothing registered: the same refusal (sm90_fwd_call registers nothing)
                assert!(sm90_fwd_call(&a, embedded).unwrap_err().starts_with(&want));
            }
        }
    }
    // registered or not, the problem's own refusals come first
    let why = sm90_fwd_call_with(&args(96, DType::F16), embedded, &|_| true).unwrap_err();
    assert!(why.starts_with("head dim 96"), "{why}");
    let off = Sm90Runtime {
        cc: (8, 0),
        ..embedded
    };
    let why = sm90_fwd_call_with(&bf16_128(), off, &|_| true).unwrap_err();
    assert!(why.starts_with("compute capability 8.0"), "{why}");
}

#[test]
fn head_dims_other_than_64_and_128_refuse() {
    for d in [32, 72, 96, 256] {
        let why = refusal(&args(d, DType::F16), H100);
        let want = format!("head dim {d}: the sm_90a forward takes 64 and 128");
        assert_eq!(why, want);
    }
}

#[test]
fn problem_sizes_the_kernel_lacks_refuse() {
    let mut a = bf16_128();
    (a.k.shape[1], a.v.shape[1]) = (0, 0);
    let why = refusal(&a, H100);
    assert_eq!(why, "seqlen_k 0: the sm_90a forward needs at least one key");

    let mut a = bf16_128();
    a.q.shape[1] = SM90_MAX_SEQLEN;
    assert_refuses(&a, H100, "shorter than 2^31 - 256");
    let mut a = bf16_128();
    (a.k.shape[1], a.v.shape[1]) = (SM90_MAX_SEQLEN, SM90_MAX_SEQLEN);
    assert_refuses(&a, H100, "shorter than 2^31 - 256");

    let mut a = bf16_128();
    a.k.shape[2] = 3;
    assert_refuses(&a, H100, "heads 8, heads_k 3");

    for dim in [0, 1, 2] {
        let mut a = bf16_128();
        a.q.shape[dim] = 0;
        assert_refuses(&a, H100, "an empty problem launches nothing");
    }
}

#[test]
fn q_k_v_layouts_tma_lacks_refuse() {
    let cases: [(usize, fn(&mut TensorDesc), &str); 6] = [
        (0, |t| t.strides[3] = 2, "q's head_dim stride is 2"),
        (
            1,
            |t| t.strides[0] = 0,
            "k's batch stride is 0 (a broadcast view)",
        ),
        (
            2,
            |t| t.strides[1] = 132,
            "v's row stride is 132 elements (264 bytes)",
        ),
        (
            0,
            |t| t.strides[2] = 4,
            "q's head stride is 4 elements (8 bytes)",
        ),
        (
            0,
            |t| t.strides[0] = 1 << 39,
            "q's batch stride is 1099511627776 bytes",
        ),
        (1, |t| t.ptr += 8, "k's base pointer 0x7f0040000008"),
    ];
    for (which, edit, want) in cases {
        let mut a = bf16_128();
        let t = match which {
            0 => &mut a.q,
            1 => &mut a.k,
            _ => &mut a.v,
        };
        edit(t);
        assert_refuses(&a, H100, want);
    }
}

#[test]
fn o_layouts_the_pair_stores_lack_refuse() {
    let cases: [(fn(&mut TensorDesc), &str); 4] = [
        (|t| t.strides[3] = 2, "o's head_dim stride is 2"),
        (|t| t.ptr += 2, "4-byte aligned pointer and even strides"),
        (
            |t| t.strides[1] = 1025,
            "4-byte aligned pointer and even strides",
        ),
        (|t| t.strides[1] = 1 << 33, "o's row stride 8589934592"),
    ];
    for (edit, want) in cases {
        let mut a = bf16_128();
        edit(&mut a.o);
        assert_refuses(&a, H100, want);
    }
}

#[test]
fn o_layouts_the_tma_epilogue_lacks_refuse() {
    // even strides and a 4-byte aligned pointer, which the pair stores took: the shipping
    // kernel's tensor map of o needs q's 16-byte multiples
    let cases: [(fn(&mut TensorDesc), &str); 3] = [
        (
            |t| t.strides[1] = 1028,
            "o's row stride is 1028 elements (2056 bytes)",
        ),
        (
            // heads padded to 132 elements
            |t| (t.strides, t.len) = ([300 * 1056, 1056, 132, 1], 2 * 300 * 1056),
            "o's head stride is 132 elements (264 bytes)",
        ),
        (|t| t.ptr += 4, "o's base pointer 0x"),
    ];
    for (edit, want) in cases {
        let mut a = bf16_128();
        edit(&mut a.o);
        assert_refuses(&a, H100, want);
    }
}

#[test]
fn the_variant_must_fit_the_shared_memory_limit() {
    let rtx = Sm90Runtime {
        smem_optin: 99 << 10,
        ..H100
    };
    let why = refusal(&bf16_128(), rtx);
    assert!(
        why.starts_with("fa3_fwd_d128_bf16_ovl_pp_m128_dyn_tst_sm90a needs "),
        "{why}"
    );
    assert!(
        why.ends_with("this runtime plans for 101376 (FlashAttention::limit_smem)"),
        "{why}"
    );
}
