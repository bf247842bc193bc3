//! Argument checks of the backward pass, through the pure validate layer (no GPU needed):
//! every bad input gives its typed `FlashError`, good inputs give the launches the ABI
//! expects (kernel, grid, parameters by name), empty problems give zero-fills.

use flash_codegen::abi::{grid, params};
use flash_codegen::{Arch, DType, Pass};
use flash_runtime::validate::{BwdArgs, ParamValue, ScratchNeed, TensorDesc, plan_bwd};
use flash_runtime::{AttnParams, BwdOptions, BwdPlan, FlashError, Mask};

const BF: DType = DType::Bf16;

mod validate_support;
use validate_support::{ACC, DVEC, atomic_bwd_args, t};

/// Contiguous tensors at distinct aligned pointers, exactly sized lse and scratch.
fn args(b: usize, sq: usize, sk: usize, h: usize, hk: usize, d: usize) -> BwdArgs<'static> {
    // atomic mode: the plans below expect the dq_accum scratch and the post pass
    atomic_bwd_args(b, sq, sk, h, hk, d)
}

fn plan(a: &BwdArgs) -> Result<BwdPlan, FlashError> {
    plan_bwd(a, Arch::Sm80)
}

fn err(a: &BwdArgs) -> (FlashError, String) {
    let e = plan(a).expect_err("expected an error");
    let msg = e.to_string();
    (e, msg)
}

fn f32_param(p: Option<ParamValue>) -> f64 {
    match p {
        Some(ParamValue::F32(x)) => x as f64,
        other => panic!("not an f32 parameter: {other:?}"),
    }
}

#[test]
fn atomic_plan_follows_the_abi() {
    let mut a = args(2, 100, 300, 8, 2, 128);
    a.params.mask = Mask::Causal;
    let p = plan(&a).unwrap();
    let names: Vec<String> = p.launches.iter().map(|l| l.spec.name()).collect();
    assert_eq!(
        names,
        [
            "fa2_bwdpre_d128_bf16_sm80",
            "fa2_bwd_d128_bf16_causal_sm80",
            "fa2_bwdpost_d128_bf16_sm80"
        ]
    );
    assert!(p.scratch_bound && p.zero_fill.is_empty() && !p.is_noop());
    assert_eq!(p.scratch, ScratchNeed::of([2, 100, 8, 128], false));
    for l in &p.launches {
        assert_eq!(Some(l.grid), grid(&l.spec, 2, 100, 300, 8, 2), "{}", l.spec);
        assert_eq!(l.block, [l.spec.tiles().threads(), 1, 1]);
        assert_eq!(l.smem_bytes, l.spec.smem_bytes());
        let abi = params(l.spec.pass);
        assert_eq!(l.params.len(), abi.len());
        for ((name, v), desc) in l.params.iter().zip(abi) {
            assert_eq!(*name, desc.name);
            assert!(v.fits(desc.ty), "{name}: {v:?} for {:?}", desc.ty);
        }
    }
    let main_spec = p.launch(Pass::Bwd).unwrap().spec;
    assert_eq!(
        p.launch(Pass::Bwd).unwrap().grid,
        [300u32.div_ceil(main_spec.tiles().block_n()), 2, 2]
    );
    let pre = p.launch(Pass::BwdPre).unwrap();
    assert_eq!(pre.param("dq_accum"), Some(ParamValue::U64(ACC)));
    assert_eq!(pre.param("do"), Some(ParamValue::U64(0x5000_0000)));
    assert_eq!(pre.param("do_row_stride"), Some(ParamValue::U32(8 * 128)));
    let main = p.launch(Pass::Bwd).unwrap();
    assert_eq!(main.param("dvec"), Some(ParamValue::U64(DVEC)));
    assert_eq!(main.param("lse"), Some(ParamValue::U64(0x9000_0000)));
    assert_eq!(main.param("dv"), Some(ParamValue::U64(0x8000_0000)));
    assert_eq!(main.param("heads_per_kv"), Some(ParamValue::U32(4)));
    assert_eq!(main.param("seqlen_k"), Some(ParamValue::U32(300)));
    assert_eq!(main.param("dk_row_stride"), Some(ParamValue::U32(256)));
    assert_eq!(
        main.param("dk_batch_stride"),
        Some(ParamValue::U64(300 * 2 * 128))
    );
    let scale = 1.0 / 128f64.sqrt();
    assert!((f32_param(main.param("softmax_scale")) - scale).abs() < 1e-7);
    let log2 = f32_param(main.param("scale_log2"));
    assert!((log2 - scale * std::f64::consts::LOG2_E).abs() < 1e-6);
    let post = p.launch(Pass::BwdPost).unwrap();
    assert_eq!(post.param("dq"), Some(ParamValue::U64(0x6000_0000)));
    assert!((f32_param(post.param("softmax_scale")) - scale).abs() < 1e-7);
}

#[test]
fn deterministic_plan_runs_dq_without_accumulator() {
    let mut a = args(1, 77, 77, 4, 4, 64);
    a.opts.deterministic = true;
    a.params.mask = Mask::Causal;
    a.scratch.as_mut().unwrap().dq_accum = None; // not needed in this mode
    let p = plan(&a).unwrap();
    let passes: Vec<Pass> = p.launches.iter().map(|l| l.spec.pass).collect();
    assert_eq!(passes, [Pass::BwdPre, Pass::Bwd, Pass::BwdDq]);
    assert!(p.launches[2].spec.mask.is_causal() && !p.launches[0].spec.mask.is_causal());
    assert_eq!(p.scratch.dq_accum, 0);
    for l in &p.launches[..2] {
        assert_eq!(l.param("dq_accum"), Some(ParamValue::U64(0)), "{}", l.spec);
    }
    let dq = &p.launches[2];
    assert_eq!(dq.grid, [2, 4, 1]);
    assert_eq!(dq.param("heads"), Some(ParamValue::U32(4)));
    assert_eq!(dq.param("dq"), Some(ParamValue::U64(0x6000_0000)));
}

#[test]
fn dry_run_sizes_the_scratch() {
    let mut a = args(2, 33, 40, 4, 2, 40);
    a.scratch = None;
    let p = plan(&a).unwrap();
    assert!(!p.scratch_bound);
    assert_eq!(p.scratch.dvec, 2 * 4 * 33);
    // whole 16-row tiles: 33 rows -> 48
    assert_eq!(p.scratch.dq_accum, 2 * 48 * 4 * 40);
    assert_eq!(p.scratch.bytes(), 4 * (2 * 4 * 33 + 2 * 48 * 4 * 40));
    assert_eq!(p.launches[1].param("dvec"), Some(ParamValue::U64(0)));
    // odd head dims run on the next kernel up, with the problem's head dim as parameter
    assert_eq!(p.launches[1].spec.head_dim, 64);
    assert_eq!(p.launches[1].param("head_dim"), Some(ParamValue::U32(40)));
    a.params.softmax_scale = Some(0.5);
    a.opts.deterministic = true;
    let p = plan(&a).unwrap();
    assert_eq!(p.scratch.dq_accum, 0);
    assert_eq!(f32_param(p.launches[2].param("softmax_scale")), 0.5);
}

#[test]
fn packed_inputs_and_padded_gradients_are_accepted() {
    let (b, s, h, d) = (2, 33, 4, 64);
    let total = b * s * 3 * h * d;
    let view = |i: usize| TensorDesc {
        shape: [b, s, h, d],
        strides: [s * 3 * h * d, 3 * h * d, d, 1],
        ptr: 0x1000_0000 + (i * h * d * 2) as u64,
        len: total - i * h * d,
        dtype: BF,
    };
    let mut a = args(b, s, s, h, h, d);
    (a.q, a.k, a.v) = (view(0), view(1), view(2));
    let row = h * (d + 8) + 8;
    a.dk.strides = [s * row + 16, row, d + 8, 1];
    a.dk.len = b * (s * row + 16);
    let p = plan(&a).unwrap();
    let main = p.launch(Pass::Bwd).unwrap();
    assert_eq!(
        main.param("k_row_stride"),
        Some(ParamValue::U32(3 * 4 * 64))
    );
    assert_eq!(main.param("dk_head_stride"), Some(ParamValue::U32(72)));
}

#[test]
fn empty_problems_zero_fill_instead_of_launching() {
    for a in [args(0, 10, 10, 2, 2, 64), args(2, 10, 10, 0, 0, 64)] {
        assert!(plan(&a).unwrap().is_noop(), "{a:?}");
    }
    // seqlen_k = 0: dq zeroed (one contiguous run), dk and dv have no elements
    let p = plan(&args(2, 10, 0, 2, 2, 64)).unwrap();
    assert!(p.launches.is_empty() && p.scratch == ScratchNeed::default());
    assert_eq!(p.zero_fill.len(), 1);
    assert_eq!(p.zero_fill[0].tensor, "dq");
    assert_eq!(
        (p.zero_fill[0].run_len, p.zero_fill[0].starts.clone()),
        (2 * 10 * 2 * 64, vec![0])
    );
    // seqlen_q = 0 (or no query heads): dk and dv zeroed, packed [b, s, 2, hk, d] layout
    let mut a = args(1, 0, 3, 2, 2, 8);
    a.dk.strides = [0, 32, 8, 1];
    a.dv.strides = a.dk.strides;
    (a.dk.len, a.dv.len) = (96, 80);
    let p = plan(&a).unwrap();
    let fills: Vec<_> = p
        .zero_fill
        .iter()
        .map(|z| (z.tensor, z.run_len, z.starts.clone()))
        .collect();
    assert_eq!(
        fills,
        [("dk", 16, vec![0, 32, 64]), ("dv", 16, vec![0, 32, 64])]
    );
    let p = plan(&args(1, 5, 3, 0, 2, 8)).unwrap();
    assert_eq!(p.zero_fill.len(), 2);
    // a zero-filled gradient is still checked
    let mut a = args(1, 5, 0, 2, 2, 64);
    a.dq.strides[2] = 0;
    let (e, _) = err(&a);
    assert!(matches!(e, FlashError::StrideMismatch { tensor: "dq", .. }));
}

#[test]
fn shape_mismatches() {
    type Edit = fn(&mut BwdArgs);
    let cases: [(Edit, &str); 10] = [
        (|a| a.v = t([1, 9, 2, 64], 0x3000_0000), "v has shape"),
        (|a| a.o = t([1, 8, 2, 32], 0x4000_0000), "o has shape"),
        (|a| a.d_o = t([1, 7, 2, 64], 0x5000_0000), "d_o has shape"),
        (|a| a.dq = t([1, 8, 1, 64], 0x6000_0000), "dq has shape"),
        (|a| a.dk = t([1, 8, 1, 64], 0x7000_0000), "dk has shape"),
        (|a| a.dv = t([2, 8, 2, 64], 0x8000_0000), "dv has shape"),
        (
            |a| {
                a.k = t([1, 8, 2, 32], 0x2000_0000);
                (a.v, a.dk, a.dv) = (a.k, a.k, a.k);
            },
            "head_dim",
        ),
        (|a| a.d_o.len -= 1, "device buffer holds"),
        (|a| a.dv.len -= 8, "device buffer holds"),
        (|a| a.lse.len = 15, "lse must hold"),
    ];
    for (edit, needle) in cases {
        let mut a = args(1, 8, 8, 2, 2, 64);
        edit(&mut a);
        let (e, msg) = err(&a);
        assert!(matches!(e, FlashError::ShapeMismatch(_)), "{e:?}");
        assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
    }
}

#[test]
fn stride_mismatches() {
    let mut a = args(1, 8, 8, 2, 2, 64);
    a.dk.strides[3] = 2;
    a.dk.len *= 2;
    let (e, msg) = err(&a);
    assert!(matches!(e, FlashError::StrideMismatch { tensor: "dk", .. }));
    assert!(msg.contains("contiguous (stride 1)"), "{msg}");

    let mut a = args(1, 8, 8, 2, 2, 64);
    a.d_o.strides[1] = 1 << 33;
    a.d_o.len = usize::MAX;
    let (e, msg) = err(&a);
    assert!(matches!(
        e,
        FlashError::StrideMismatch { tensor: "d_o", .. }
    ));
    assert!(msg.contains("fit in u32"), "{msg}");

    for out in ["dq", "dv"] {
        let mut a = args(1, 8, 8, 2, 2, 64);
        match out {
            "dq" => a.dq.strides[2] = 0,
            _ => a.dv.strides[1] = 64, // rows overlap the second head
        }
        let (e, msg) = err(&a);
        assert!(
            matches!(e, FlashError::StrideMismatch { tensor, .. } if tensor == out),
            "{e:?}"
        );
        assert!(msg.contains("share memory"), "{msg}");
    }
}

#[test]
fn unsupported_head_dims_and_heads_not_divisible() {
    for d in [0, 4, 60, 264] {
        let (e, _) = err(&args(1, 8, 8, 2, 2, d));
        assert!(matches!(e, FlashError::UnsupportedHeadDim { head_dim } if head_dim == d));
    }
    for (h, hk) in [(8, 3), (2, 4), (4, 0)] {
        let (e, _) = err(&args(1, 8, 8, h, hk, 64));
        assert!(
            matches!(e, FlashError::HeadsNotDivisible { heads, heads_k } if heads == h && heads_k == hk)
        );
    }
}

#[test]
fn dtype_mismatches() {
    type Pick = for<'a> fn(&'a mut BwdArgs<'static>) -> &'a mut TensorDesc;
    let picks: [(&str, Pick); 7] = [
        ("k", |a| &mut a.k),
        ("v", |a| &mut a.v),
        ("o", |a| &mut a.o),
        ("d_o", |a| &mut a.d_o),
        ("dq", |a| &mut a.dq),
        ("dk", |a| &mut a.dk),
        ("dv", |a| &mut a.dv),
    ];
    for (name, pick) in picks {
        let mut a = args(1, 8, 8, 2, 2, 64);
        pick(&mut a).dtype = DType::F16;
        let (e, msg) = err(&a);
        assert!(
            matches!(e, FlashError::DTypeMismatch { tensor, .. } if tensor == name),
            "{e:?}"
        );
        assert!(
            msg.contains(&format!("`{name}` is f16 but q is bf16")),
            "{msg}"
        );
    }
}

#[test]
fn misaligned_pointers_and_strides() {
    type Edit = fn(&mut BwdArgs);
    let cases: [(Edit, &str, &str); 5] = [
        (|a| a.d_o.ptr += 2, "d_o", "16-byte aligned"),
        (
            |a| {
                a.dk.strides[1] = 2 * 64 + 4;
                a.dk.len = 10_000;
            },
            "dk",
            "row stride 132",
        ),
        (|a| a.lse.ptr += 2, "lse", "4-byte aligned"),
        (
            |a| a.scratch.as_mut().unwrap().dvec.ptr += 4,
            "dvec",
            "16-byte aligned",
        ),
        (
            |a| a.scratch.as_mut().unwrap().dq_accum.as_mut().unwrap().ptr = 0,
            "dq_accum",
            "null",
        ),
    ];
    for (edit, name, needle) in cases {
        let mut a = args(1, 8, 8, 2, 2, 64);
        edit(&mut a);
        let (e, msg) = err(&a);
        assert!(
            matches!(e, FlashError::Misaligned { tensor, .. } if tensor == name),
            "{e:?}"
        );
        assert!(msg.contains(needle), "{msg}");
    }
}

#[test]
fn scratch_too_small_or_missing() {
    let mut a = args(2, 8, 8, 2, 2, 64);
    a.scratch.as_mut().unwrap().dvec.len -= 1;
    let (e, msg) = err(&a);
    assert!(matches!(
        e,
        FlashError::ScratchTooSmall {
            buffer: "dvec",
            needed: 32,
            available: 31
        }
    ));
    assert!(msg.contains("BwdScratch::new"), "{msg}");
    let mut a = args(2, 8, 8, 2, 2, 64);
    a.scratch.as_mut().unwrap().dq_accum.as_mut().unwrap().len = 100;
    let (e, _) = err(&a);
    assert!(matches!(
        e,
        FlashError::ScratchTooSmall {
            buffer: "dq_accum",
            needed: 4096, // 2 x 2 heads x 16 rows (one tile) x 64
            available: 100
        }
    ));
    // a deterministic-mode scratch (no accumulator) in an atomic-mode call
    let mut a = args(2, 8, 8, 2, 2, 64);
    a.scratch.as_mut().unwrap().dq_accum = None;
    let (e, msg) = err(&a);
    assert!(matches!(
        e,
        FlashError::ScratchTooSmall {
            buffer: "dq_accum",
            available: 0,
            ..
        }
    ));
    assert!(msg.contains("deterministic: false"), "{msg}");
}

#[test]
fn grid_too_large_and_invalid_scale() {
    let (e, msg) = err(&args(1, 8, 8, 70_000, 1, 64));
    assert!(matches!(e, FlashError::GridTooLarge { grid, .. } if grid[1] == 70_000));
    assert!(msg.contains("65535"), "{msg}");
    let (e, _) = err(&args(70_000, 8, 8, 2, 2, 64));
    assert!(matches!(e, FlashError::GridTooLarge { grid, .. } if grid[2] == 70_000));
    for s in [f32::NAN, f32::NEG_INFINITY] {
        let mut a = args(1, 8, 8, 2, 2, 64);
        a.params.softmax_scale = Some(s);
        let (e, msg) = err(&a);
        assert!(matches!(e, FlashError::InvalidParam(_)) && msg.contains("finite"));
    }
}

#[test]
fn default_mode_is_atomic() {
    // like FlashAttention-2; the deterministic mode is opt-in (see BwdOptions::deterministic)
    assert!(!BwdOptions::default().deterministic);
    assert_eq!(BwdOptions::default(), BwdOptions::new());
    assert_eq!(AttnParams::default().softmax_scale, None);
    assert_eq!(AttnParams::default().mask, Mask::None);
}

#[test]
fn scratch_sizes() {
    let need = ScratchNeed::of([2, 1000, 16, 128], false);
    assert_eq!(need.dvec, 2 * 16 * 1000);
    assert_eq!(need.dq_accum, 2 * 1008 * 16 * 128);
    assert_eq!(
        flash_runtime::BwdScratch::bytes([2, 1000, 16, 128], false),
        need.bytes()
    );
    assert_eq!(ScratchNeed::of([2, 1000, 16, 128], true).dq_accum, 0);
    assert_eq!(
        ScratchNeed::of([usize::MAX, 2, 2, 8], false).bytes(),
        usize::MAX
    );
}
