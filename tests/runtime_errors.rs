//! Argument checks of the forward pass, through the pure validate layer (no GPU needed):
//! every bad input gives its typed `FlashError` with an actionable message, and good inputs
//! give the launch plan the ABI expects.

use flash_codegen::abi::FWD_PARAMS;
use flash_codegen::{Arch, DType, Tiling};
use flash_runtime::validate::{FwdArgs, LseDesc, ParamValue, TensorDesc, plan_fwd, plan_fwd_on};
use flash_runtime::{AttnParams, FlashError, FwdPlan, Mask, tensor::contiguous_strides};

const BF: DType = DType::Bf16;

fn t(shape: [usize; 4], ptr: u64) -> TensorDesc {
    let strides = contiguous_strides(shape);
    TensorDesc {
        shape,
        strides,
        ptr,
        len: shape.iter().product(),
        dtype: BF,
    }
}

/// q [b, sq, h, d], k/v [b, sk, hk, d], contiguous, distinct aligned pointers.
fn args(b: usize, sq: usize, sk: usize, h: usize, hk: usize, d: usize) -> FwdArgs<'static> {
    FwdArgs {
        q: t([b, sq, h, d], 0x1000_0000),
        k: t([b, sk, hk, d], 0x2000_0000),
        v: t([b, sk, hk, d], 0x3000_0000),
        o: t([b, sq, h, d], 0x4000_0000),
        lse: None,
        params: AttnParams::new(),
        alibi: None,
    }
}

fn plan(a: &FwdArgs) -> Result<FwdPlan, FlashError> {
    plan_fwd(a, Arch::Sm80)
}

fn err(a: &FwdArgs) -> (FlashError, String) {
    let e = plan(a).expect_err("expected an error");
    let msg = e.to_string();
    (e, msg)
}

/// On a GPU with 99 KiB of shared memory per block (RTX 30/40) the d256 forward plans
/// its compact kernel, same grid, block and parameters; with 227 KiB (H100/H200) the
/// standard one; other head dims never change.
#[test]
fn the_gpus_shared_memory_picks_the_tiling() {
    let a = args(2, 1000, 1000, 8, 2, 256);
    let (small, big) = (
        plan_fwd_on(&a, Arch::Sm80, 99 * 1024).unwrap(),
        plan_fwd_on(&a, Arch::Sm80, 227 * 1024).unwrap(),
    );
    assert_eq!(small.spec.tiling, Tiling::Compact);
    assert_eq!(small.spec.name(), "fa2_fwd_d256_bf16_compact_sm80");
    assert!(small.smem_bytes <= 99 * 1024);
    assert_eq!(big.spec.tiling, Tiling::Standard);
    assert!(big.smem_bytes > 99 * 1024);
    assert_eq!((small.grid, small.block), (big.grid, big.block));
    assert_eq!(small.params, big.params);
    let a = args(2, 1000, 1000, 8, 2, 128);
    let p = plan_fwd_on(&a, Arch::Sm80, 99 * 1024).unwrap();
    assert_eq!(p.spec.tiling, Tiling::Standard);
}

#[test]
fn good_plan_follows_the_abi() {
    let mut a = args(2, 100, 300, 8, 2, 128);
    a.params.mask = Mask::Causal;
    a.lse = Some(LseDesc {
        ptr: 0x5000_0000,
        len: 2 * 8 * 100,
    });
    let p = plan(&a).unwrap();
    assert_eq!(p.spec.name(), "fa2_fwd_d128_bf16_causal_sm80");
    assert_eq!(p.grid, [100u32.div_ceil(p.spec.tiles().block_m()), 8, 2]);
    assert_eq!(p.block, [p.spec.tiles().threads(), 1, 1]);
    assert_eq!(p.smem_bytes, p.spec.smem_bytes());
    assert_eq!(p.params.len(), FWD_PARAMS.len());
    for ((name, v), desc) in p.params.iter().zip(FWD_PARAMS.iter()) {
        assert_eq!(*name, desc.name);
        assert!(v.fits(desc.ty), "{name}: {v:?} for {:?}", desc.ty);
        assert_eq!(v.ty(), desc.ty.name(), "{name}");
    }
    assert_eq!(p.param("q"), Some(ParamValue::U64(0x1000_0000)));
    assert_eq!(p.param("lse"), Some(ParamValue::U64(0x5000_0000)));
    assert_eq!(p.param("seqlen_q"), Some(ParamValue::U32(100)));
    assert_eq!(p.param("seqlen_k"), Some(ParamValue::U32(300)));
    assert_eq!(p.param("heads_per_kv"), Some(ParamValue::U32(4)));
    assert_eq!(p.param("k_row_stride"), Some(ParamValue::U32(256)));
    assert_eq!(
        p.param("q_batch_stride"),
        Some(ParamValue::U64(100 * 8 * 128))
    );
    let Some(ParamValue::F32(s)) = p.param("scale_log2") else {
        panic!()
    };
    assert!((s as f64 - std::f64::consts::LOG2_E / 128f64.sqrt()).abs() < 1e-6);
    assert!(!p.is_noop());
}

#[test]
fn odd_head_dims_run_on_the_next_kernel_and_scale_is_honoured() {
    let mut a = args(1, 17, 17, 2, 1, 40);
    a.params.softmax_scale = Some(0.5);
    let p = plan(&a).unwrap();
    assert_eq!(p.spec.head_dim, 64);
    assert_eq!(p.param("head_dim"), Some(ParamValue::U32(40)));
    assert_eq!(p.param("heads_per_kv"), Some(ParamValue::U32(2)));
    assert_eq!(p.param("lse"), Some(ParamValue::U64(0)));
    let Some(ParamValue::F32(s)) = p.param("scale_log2") else {
        panic!()
    };
    assert!((s as f64 - 0.5 * std::f64::consts::LOG2_E).abs() < 1e-6);
}

#[test]
fn packed_qkv_and_size_one_dims_are_accepted() {
    let (b, s, h, d) = (2, 33, 4, 64);
    let total = b * s * 3 * h * d;
    let strides = [s * 3 * h * d, 3 * h * d, d, 1];
    let view = |i: usize| TensorDesc {
        shape: [b, s, h, d],
        strides,
        ptr: 0x1000_0000 + (i * h * d * 2) as u64,
        len: total - i * h * d,
        dtype: BF,
    };
    let mut a = args(b, s, s, h, h, d);
    (a.q, a.k, a.v) = (view(0), view(1), view(2));
    let p = plan(&a).unwrap();
    assert_eq!(
        p.param("k_row_stride"),
        Some(ParamValue::U32(3 * h as u32 * d as u32))
    );
    // batch 1 and one kv head: those strides are never used, so odd values are fine
    let mut a = args(1, 5, 5, 2, 1, 8);
    a.q.strides[0] = 3;
    a.k.strides[2] = 5;
    let p = plan(&a).unwrap();
    assert_eq!(p.param("q_batch_stride"), Some(ParamValue::U64(0)));
}

#[test]
fn empty_problems_launch_nothing_and_empty_keys_launch() {
    for a in [
        args(0, 10, 10, 2, 2, 64),
        args(2, 10, 10, 0, 0, 64),
        args(2, 0, 10, 2, 2, 64),
    ] {
        let p = plan(&a).unwrap();
        assert!(p.is_noop() && p.params.is_empty(), "{a:?}");
    }
    // seqlen_k = 0: launched, the kernel writes o = 0 and lse = -inf (fully masked rows)
    let mut a = args(1, 10, 0, 2, 2, 64);
    a.k.ptr = 0;
    a.v.ptr = 3;
    let p = plan(&a).unwrap();
    assert!(!p.is_noop());
    assert_eq!(p.param("seqlen_k"), Some(ParamValue::U32(0)));
}

#[test]
fn shape_mismatches() {
    let cases: Vec<(FwdArgs<'static>, &str)> = vec![
        (
            {
                let mut a = args(1, 8, 8, 2, 2, 64);
                a.v = t([1, 9, 2, 64], 0x3000_0000);
                a
            },
            "v has shape",
        ),
        (
            {
                let mut a = args(1, 8, 8, 2, 2, 64);
                a.o = t([1, 8, 2, 32], 0x4000_0000);
                a
            },
            "o has shape",
        ),
        (
            {
                let mut a = args(2, 8, 8, 2, 2, 64);
                a.k = t([1, 8, 2, 64], 0x2000_0000);
                a.v = a.k;
                a
            },
            "batch",
        ),
        (
            {
                let mut a = args(1, 8, 8, 2, 2, 64);
                a.k = t([1, 8, 2, 32], 0x2000_0000);
                a.v = a.k;
                a
            },
            "head_dim",
        ),
        (
            {
                let mut a = args(1, 8, 8, 2, 2, 64);
                a.q.len -= 1;
                a
            },
            "device buffer holds",
        ),
        (
            {
                let mut a = args(1, 8, 8, 2, 2, 64);
                a.lse = Some(LseDesc {
                    ptr: 0x5000_0000,
                    len: 15,
                });
                a
            },
            "lse must hold",
        ),
    ];
    for (a, needle) in cases {
        let (e, msg) = err(&a);
        assert!(matches!(e, FlashError::ShapeMismatch(_)), "{e:?}");
        assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
    }
}

#[test]
fn stride_mismatches() {
    let mut a = args(1, 8, 8, 2, 2, 64);
    a.k.strides[3] = 2;
    a.k.len *= 2;
    let (e, msg) = err(&a);
    assert!(
        matches!(e, FlashError::StrideMismatch { tensor: "k", .. }),
        "{e:?}"
    );
    assert!(msg.contains("contiguous (stride 1)"), "{msg}");

    let mut a = args(1, 8, 8, 2, 2, 64);
    a.v.strides[1] = 1 << 33;
    a.v.len = usize::MAX;
    let (e, msg) = err(&a);
    assert!(
        matches!(e, FlashError::StrideMismatch { tensor: "v", .. }),
        "{e:?}"
    );
    assert!(msg.contains("fit in u32"), "{msg}");

    let mut a = args(1, 8, 8, 2, 2, 64);
    a.o.strides[2] = 0; // both heads write the same memory
    let (e, msg) = err(&a);
    assert!(
        matches!(e, FlashError::StrideMismatch { tensor: "o", .. }),
        "{e:?}"
    );
    assert!(msg.contains("share memory"), "{msg}");
}

#[test]
fn unsupported_head_dims() {
    for d in [0, 4, 60, 100, 264, 512] {
        let (e, msg) = err(&args(1, 8, 8, 2, 2, d));
        assert!(matches!(e, FlashError::UnsupportedHeadDim { head_dim } if head_dim == d));
        assert!(
            msg.contains("multiples of 8") && msg.contains("256"),
            "{msg}"
        );
    }
    for d in [8, 32, 40, 72, 200, 256] {
        assert!(plan(&args(1, 8, 8, 2, 2, d)).is_ok(), "d = {d}");
    }
}

#[test]
fn heads_not_divisible() {
    for (h, hk) in [(8, 3), (2, 4), (4, 0)] {
        let (e, msg) = err(&args(1, 8, 8, h, hk, 64));
        assert!(
            matches!(e, FlashError::HeadsNotDivisible { heads, heads_k } if heads == h && heads_k == hk)
        );
        assert!(
            msg.contains(&format!("heads ({h})")) && msg.contains("MQA"),
            "{msg}"
        );
    }
}

#[test]
fn dtype_mismatch() {
    let mut a = args(1, 8, 8, 2, 2, 64);
    a.k.dtype = DType::F16;
    let (e, msg) = err(&a);
    assert!(
        matches!(e, FlashError::DTypeMismatch { tensor: "k", .. }),
        "{e:?}"
    );
    assert!(msg.contains("`k` is f16 but q is bf16"), "{msg}");
}

#[test]
fn misaligned_pointers_and_strides() {
    let mut cases: Vec<(FwdArgs<'static>, &str, &str)> = Vec::new();
    let mut a = args(1, 8, 8, 2, 2, 64);
    a.q.ptr += 2;
    cases.push((a, "q", "16-byte aligned"));
    let mut a = args(1, 8, 8, 2, 2, 64);
    a.o.strides[1] = 2 * 64 + 4;
    a.o.len = 10_000;
    cases.push((a, "o", "row stride 132"));
    let mut a = args(2, 8, 8, 2, 2, 64);
    a.v.strides[0] += 2;
    a.v.len += 2;
    cases.push((a, "v", "batch stride"));
    let mut a = args(1, 8, 8, 2, 2, 64);
    a.lse = Some(LseDesc {
        ptr: 0x5000_0002,
        len: 16,
    });
    cases.push((a, "lse", "4-byte aligned"));
    for (a, tensor_name, needle) in cases {
        let (e, msg) = err(&a);
        assert!(
            matches!(e, FlashError::Misaligned { tensor, .. } if tensor == tensor_name),
            "{e:?}"
        );
        assert!(
            msg.contains(needle) && msg.contains("multiples of 8 elements"),
            "{msg}"
        );
    }
}

#[test]
fn grid_too_large() {
    let (e, msg) = err(&args(1, 8, 8, 70_000, 1, 64));
    assert!(matches!(e, FlashError::GridTooLarge { grid, .. } if grid[1] == 70_000));
    assert!(msg.contains("65535"), "{msg}");
    let (e, _) = err(&args(70_000, 8, 8, 2, 2, 64));
    assert!(matches!(e, FlashError::GridTooLarge { grid, .. } if grid[2] == 70_000));
}

#[test]
fn invalid_scale() {
    for s in [f32::NAN, f32::INFINITY, 0.0, -0.125, 3.0e38] {
        let mut a = args(1, 8, 8, 2, 2, 64);
        a.params.softmax_scale = Some(s);
        let (e, msg) = err(&a);
        assert!(
            matches!(e, FlashError::InvalidParam(_)) && msg.contains("positive and finite"),
            "{msg}"
        );
    }
}

#[test]
fn no_driver_is_an_error_not_a_panic() {
    if flash_runtime::driver_present() {
        return; // a machine with a driver: covered by the GPU tests
    }
    let e = flash_runtime::FlashAttention::on_device(0)
        .err()
        .expect("no driver here");
    assert!(matches!(e, FlashError::NoDriver));
    assert!(e.to_string().contains("libcuda"));
}

#[test]
fn messages_of_gpu_side_errors() {
    let e = FlashError::UnsupportedGpu {
        name: "Tesla V100".into(),
        major: 7,
        minor: 0,
    };
    assert!(e.to_string().contains("compute capability 7.0") && e.to_string().contains("8.0"));
    let e = FlashError::Jit {
        kernel: "k".into(),
        log: "ptxas fatal: line 3".into(),
    };
    assert!(e.to_string().contains("line 3"));
    let e = FlashError::SharedMemoryLimit {
        kernel: "k".into(),
        needed: 200_000,
        limit: 101_376,
    };
    assert!(e.to_string().contains("200000") && e.to_string().contains("101376"));
}
