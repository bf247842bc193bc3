//! Argument checks of the KV-cache (split-KV) forward, through the pure validate layer (no
//! GPU needed): every bad input gives its typed `FlashError` with an actionable message,
//! good inputs give the split and combine launches the ABI expects (the split rule:
//! runtime_split_rule.rs).

mod kvcache_support;

use flash_codegen::DType;
use flash_codegen::abi::decode::{combine_grid, split_grid};
use flash_runtime::validate::{LaunchPlan, ParamValue, TensorDesc};
use flash_runtime::{FlashError, Mask};
use kvcache_support::{
    BF, SEQLENS, args, assert_follows_abi, buf, err, misaligned_cases, plan, shape_mismatch_cases,
    stride_mismatch_cases, with_splits,
};

#[test]
fn split_and_combine_follow_the_abi() {
    let (b, sq, cap, h, hk, d) = (2, 3, 32768, 32, 8, 128);
    let mut a = args(b, sq, cap, h, hk, d);
    a.params.mask = Mask::Causal;
    a.lse = Some(buf(0x5000_0000, b * h * sq));
    let mut p = plan(&a).unwrap();
    let n = p.num_splits;
    assert!(n > 1 && !p.is_noop() && !p.scratch_bound, "{n}");
    let (split, combine) = (&p.split, p.combine.as_ref().unwrap());
    assert_eq!(split.spec.name(), "fa2_fwdsplit_d128_bf16_causal_sm80");
    assert_eq!(n, 8); // 2 x 8 CTAs a split on 132 SMs
    assert_eq!(combine.spec.name(), "fa2_fwdcombine_d128_bf16_prefill_sm80");
    // up to 8 splits: a row per warp; more than 32: 8 warps a row
    let wide = plan(&args(1, 1, 32768, 8, 1, 128)).unwrap();
    assert_eq!(wide.num_splits, 64);
    let wc = wide.combine.as_ref().unwrap();
    assert_eq!(wc.spec.name(), "fa2_fwdcombine_d128_bf16_long_sm80");
    assert_follows_abi(wc);
    let name = |n| {
        let p = plan(&with_splits(args(1, 1, 32768, 8, 1, 128), n)).unwrap();
        p.combine.unwrap().spec.name()
    };
    assert_eq!(name(32), "fa2_fwdcombine_d128_bf16_sm80");
    assert_eq!(name(9), "fa2_fwdcombine_d128_bf16_sm80");
    assert_eq!(name(8), "fa2_fwdcombine_d128_bf16_prefill_sm80");
    assert_eq!(name(2), "fa2_fwdcombine_d128_bf16_prefill_sm80");
    let dims = [b as u32, sq as u32, h as u32, hk as u32];
    assert_eq!(split.grid, split_grid(&split.spec, dims, n));
    assert_eq!(split.grid, [1, 8, 2 * n]); // 3 * 4 packed rows fit one 64-row tile
    assert_eq!(combine.grid, combine_grid(&combine.spec, [2, 3, 32]));
    let launches: Vec<&LaunchPlan> = p.launches().collect();
    assert_eq!(launches, [split, combine]);
    launches.iter().for_each(|l| assert_follows_abi(l));
    assert_eq!(split.param("seqlens_k"), Some(ParamValue::U64(SEQLENS)));
    assert_eq!(split.param("seqlen_k"), Some(ParamValue::U32(32768)));
    assert_eq!(split.param("heads_per_kv"), Some(ParamValue::U32(4)));
    assert_eq!(split.param("num_splits"), Some(ParamValue::U32(n)));
    assert_eq!(split.param("k_row_stride"), Some(ParamValue::U32(8 * 128)));
    assert_eq!(split.param("o_accum"), Some(ParamValue::U64(0)));
    assert_eq!(combine.param("num_splits"), Some(ParamValue::U32(n)));
    assert_eq!(combine.param("lse"), Some(ParamValue::U64(0x5000_0000)));
    assert_eq!(
        combine.param("o_row_stride"),
        Some(ParamValue::U32(32 * 128))
    );
    let Some(ParamValue::F32(s)) = split.param("scale_log2") else {
        panic!()
    };
    assert!((s as f64 - std::f64::consts::LOG2_E / 128f64.sqrt()).abs() < 1e-6);
    // scratch: num_splits * b * h * sq rows of the kernel head dim, and their LSEs
    let rows = n as usize * b * h * sq;
    assert_eq!((p.o_accum_len, p.lse_accum_len), (rows * 128, rows));
    let (oa, la) = (0xa000_0000, 0xb000_0000);
    p.bind_scratch(buf(oa, rows * 128), buf(la, rows)).unwrap();
    assert!(p.scratch_bound);
    for l in p.launches() {
        assert_eq!(l.param("o_accum"), Some(ParamValue::U64(oa)), "{}", l.spec);
        assert_eq!(
            l.param("lse_accum"),
            Some(ParamValue::U64(la)),
            "{}",
            l.spec
        );
        assert_follows_abi(l);
    }
}

#[test]
fn one_split_runs_alone_without_scratch() {
    let a = with_splits(args(2, 1, 1000, 8, 2, 64), 1);
    let mut p = plan(&a).unwrap();
    assert_eq!((p.num_splits, p.o_accum_len, p.lse_accum_len), (1, 0, 0));
    assert!(p.combine.is_none() && p.scratch_bound && p.launches().count() == 1);
    assert_follows_abi(&p.split);
    assert_eq!(p.split.param("o_accum"), Some(ParamValue::U64(0)));
    assert_eq!(p.split.param("lse_accum"), Some(ParamValue::U64(0)));
    assert_eq!(p.split.param("num_splits"), Some(ParamValue::U32(1)));
    assert_eq!(p.split.param("lse"), Some(ParamValue::U64(0)));
    p.bind_scratch(buf(0, 0), buf(0, 0)).unwrap();
    // no seqlens_k: every sequence is full, the kernels get 0
    let mut a = a;
    a.seqlens_k = None;
    assert_eq!(
        plan(&a).unwrap().split.param("seqlens_k"),
        Some(ParamValue::U64(0))
    );
}

#[test]
fn empty_problems_launch_nothing_and_empty_caches_launch() {
    for a in [
        args(0, 1, 100, 8, 2, 64),
        args(2, 1, 100, 0, 0, 64),
        args(2, 0, 100, 8, 2, 64),
        with_splits(args(0, 1, 1 << 20, 8, 2, 64), 64),
    ] {
        let p = plan(&a).unwrap();
        assert!(p.is_noop() && p.split.params.is_empty(), "{a:?}");
        assert!(p.combine.is_none() && p.scratch_bound);
        assert_eq!((p.num_splits, p.o_accum_len, p.lse_accum_len), (1, 0, 0));
        assert_eq!(p.launches().count(), 1);
    }
    // capacity 0: launched, the kernel writes o = 0 and lse = -inf without reading k or v
    let mut a = args(2, 1, 0, 8, 2, 64);
    a.k.ptr = 0;
    a.v.ptr = 3;
    let p = plan(&a).unwrap();
    assert!(!p.is_noop() && p.combine.is_none());
    assert_eq!(p.split.param("seqlen_k"), Some(ParamValue::U32(0)));
}

/// The caches may be views of larger buffers (room for longer sequences, more layers).
#[test]
fn strided_cache_views_are_accepted() {
    let (b, cap, room, hk, d) = (2, 100, 256, 2, 64);
    let cache = |ptr| TensorDesc {
        shape: [b, cap, hk, d],
        strides: [2 * room * hk * d, hk * d, d, 1], // every other [room, hk, d] block
        ptr,
        len: 2 * b * room * hk * d,
        dtype: BF,
    };
    let mut a = args(b, 1, cap, 8, hk, d);
    (a.k, a.v) = (cache(0x2000_0000), cache(0x3000_0000));
    let p = plan(&a).unwrap();
    let stride = (2 * room * hk * d) as u64;
    assert_eq!(
        p.split.param("k_batch_stride"),
        Some(ParamValue::U64(stride))
    );
    assert_eq!(p.split.param("v_row_stride"), Some(ParamValue::U32(128)));
    a.v.len = stride as usize + (cap - 1) * hk * d + hk * d - 1; // one element short
    let (e, msg) = err(&a);
    assert!(matches!(e, FlashError::ShapeMismatch(_)), "{e:?}");
    assert!(
        msg.contains("`v_cache`") && msg.contains("device buffer holds"),
        "{msg}"
    );
}

#[test]
fn shape_mismatches() {
    for (a, needle) in shape_mismatch_cases() {
        let (e, msg) = err(&a);
        assert!(matches!(e, FlashError::ShapeMismatch(_)), "{e:?}");
        assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
    }
}

#[test]
fn stride_mismatches() {
    for (a, name, needle) in stride_mismatch_cases() {
        let (e, msg) = err(&a);
        assert!(
            matches!(e, FlashError::StrideMismatch { tensor, .. } if tensor == name),
            "{e:?}"
        );
        assert!(msg.contains(needle), "{msg}");
    }
}

#[test]
fn head_dims_heads_dtypes_and_scale() {
    for d in [0, 4, 60, 264] {
        let (e, msg) = err(&args(1, 1, 64, 2, 2, d));
        assert!(matches!(e, FlashError::UnsupportedHeadDim { head_dim } if head_dim == d));
        assert!(msg.contains("multiples of 8"), "{msg}");
    }
    for (h, hk) in [(8, 3), (2, 4), (4, 0)] {
        let (e, msg) = err(&args(1, 1, 64, h, hk, 64));
        assert!(
            matches!(e, FlashError::HeadsNotDivisible { heads, heads_k } if heads == h && heads_k == hk)
        );
        assert!(msg.contains("MQA"), "{msg}");
    }
    let mut a = args(1, 1, 64, 2, 2, 64);
    a.v.dtype = DType::F16;
    let (e, msg) = err(&a);
    assert!(
        matches!(
            e,
            FlashError::DTypeMismatch {
                tensor: "v_cache",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(msg.contains("`v_cache` is f16 but q is bf16"), "{msg}");
    for s in [f32::NAN, 0.0, -1.0, 3.0e38] {
        let mut a = args(1, 1, 64, 2, 2, 64);
        a.params.softmax_scale = Some(s);
        let (e, msg) = err(&a);
        assert!(matches!(e, FlashError::InvalidParam(_)) && msg.contains("positive and finite"));
    }
}

#[test]
fn misaligned_pointers_and_strides() {
    for (a, name, needle) in misaligned_cases() {
        let (e, msg) = err(&a);
        assert!(
            matches!(e, FlashError::Misaligned { tensor, .. } if tensor == name),
            "{e:?}"
        );
        assert!(msg.contains(needle), "{msg}");
    }
}

#[test]
fn grid_too_large() {
    // z = batch * num_splits
    let (e, msg) = err(&with_splits(args(1000, 1, 32768, 8, 8, 128), 100));
    assert!(
        matches!(e, FlashError::GridTooLarge { grid, .. } if grid[2] == 100_000),
        "{e:?}"
    );
    assert!(
        msg.contains("batch * num_splits") && msg.contains("fewer splits"),
        "{msg}"
    );
    let (e, _) = err(&args(70_000, 1, 64, 2, 2, 64));
    assert!(
        matches!(e, FlashError::GridTooLarge { grid, .. } if grid[2] == 70_000),
        "{e:?}"
    );
    // y = heads_k
    let (e, msg) = err(&args(1, 1, 64, 70_000, 70_000, 64));
    assert!(
        matches!(e, FlashError::GridTooLarge { grid, .. } if grid[1] == 70_000),
        "{e:?}"
    );
    assert!(msg.contains("heads_k"), "{msg}");
    // x: the packed rows of one sequence must fit the kernels' 32-bit row index
    let (e, msg) = err(&args(1, 1 << 27, 64, 64, 1, 64));
    assert!(matches!(e, FlashError::GridTooLarge { .. }), "{e:?}");
    assert!(
        msg.contains("seqlen_q * heads") && msg.contains("32-bit"),
        "{msg}"
    );
}

#[test]
fn scratch_binding_is_checked() {
    let p = plan(&with_splits(args(1, 1, 4096, 8, 8, 128), 4)).unwrap();
    let (o_len, l_len) = (p.o_accum_len, p.lse_accum_len);
    assert_eq!((o_len, l_len), (4 * 8 * 128, 4 * 8));
    let mut q = p.clone();
    let e = q
        .bind_scratch(buf(0xa000_0000, o_len - 1), buf(0xb000_0000, l_len))
        .unwrap_err();
    assert!(
        matches!(e, FlashError::ShapeMismatch(_)) && e.to_string().contains("o_accum"),
        "{e}"
    );
    assert!(!q.scratch_bound);
    let mut q = p.clone();
    let e = q
        .bind_scratch(buf(0xa000_0000, o_len), buf(0xb000_0004, l_len))
        .unwrap_err();
    assert!(
        matches!(e, FlashError::Internal(_)) && e.to_string().contains("lse_accum"),
        "{e}"
    );
}
