//! Which tiling the backward's passes run on, through the pure validate layer (no GPU):
//! the long row for long sequences in atomic mode, the compact rows where the GPU's
//! shared memory per block is below the standard (or long) row's or where they keep more
//! warps per SM (an A100), each on the grid of its own tiles; a tiling fixed by
//! `BwdOptions::tiling`, checked.

use flash_codegen::{Arch, KernelSpec, Pass, Tiling};
use flash_runtime::FlashError;
use flash_runtime::validate::{BwdArgs, GpuFill, plan_bwd_fill, plan_bwd_on, plan_bwd_with};

mod validate_support;
use validate_support::atomic_bwd_args as args;

/// RTX 30/40, L4, L40: 99 KiB of dynamic shared memory per block.
const RTX: u64 = 99 * 1024;

/// The main pass runs on its long tiling (d128: 128 keys per CTA) from `long_from` query
/// rows on in atomic mode, with the grid of its own tiles; below, in deterministic mode,
/// or when the long tiling is not allowed (a runtime without its PTX), on the standard one.
#[test]
fn long_sequences_take_the_long_tiling_in_atomic_mode() {
    let main = |a: &BwdArgs, long_ok: bool| {
        let p = plan_bwd_with(a, Arch::Sm80, long_ok).unwrap();
        let l = p.launch(Pass::Bwd).unwrap();
        (l.spec.name(), l.grid)
    };
    let from = "fa2_bwd_d128_bf16_sm80"
        .parse::<flash_codegen::KernelSpec>()
        .unwrap()
        .long_from()
        .unwrap() as usize;
    let a = args(1, from, 1000, 2, 2, 120);
    assert_eq!(
        main(&a, true),
        ("fa2_bwd_d128_bf16_long_sm80".into(), [8, 2, 1])
    );
    assert_eq!(
        main(&a, false),
        ("fa2_bwd_d128_bf16_sm80".into(), [16, 2, 1])
    );
    let short = args(1, from - 1, 1000, 2, 2, 120);
    assert_eq!(main(&short, true).0, "fa2_bwd_d128_bf16_sm80");
    let mut det = a;
    det.opts.deterministic = true;
    det.scratch.as_mut().unwrap().dq_accum = None;
    assert_eq!(main(&det, true).0, "fa2_bwd_d128_bf16_sm80");
    // head dims without a long row keep the standard one
    assert_eq!(
        main(&args(1, from, 64, 2, 2, 64), true).0,
        "fa2_bwd_d64_bf16_sm80"
    );
}

/// A sliding window reaching fewer than `LONG_MIN_WINDOW_REACH` keys runs the standard row
/// at any length (its key blocks see few query blocks); a longer window, causal and
/// unmasked calls keep the rule of the length.
#[test]
fn short_windows_keep_the_standard_tiling() {
    use flash_runtime::AttnParams;
    use flash_runtime::validate::{LONG_MIN_WINDOW_REACH, rule_rows};
    let reach = LONG_MIN_WINDOW_REACH as i32;
    let main = |sq: usize, window: Option<(i32, i32)>| {
        let mut a = args(1, sq, sq, 2, 2, 128);
        if let Some((left, right)) = window {
            a.params = AttnParams::new().with_window(left, right);
        }
        let p = plan_bwd_with(&a, Arch::Sm80, true).unwrap();
        p.launch(Pass::Bwd).unwrap().spec.name()
    };
    let (long, standard) = (
        "fa2_bwd_d128_bf16_local_long_sm80",
        "fa2_bwd_d128_bf16_local_sm80",
    );
    for sq in [8192, 32768] {
        assert_eq!(main(sq, Some((255, 0))), standard, "{sq}");
        assert_eq!(main(sq, Some((1023, 0))), standard, "{sq}");
        assert_eq!(main(sq, Some((reach - 2, 0))), standard, "{sq}");
        assert_eq!(main(sq, Some((reach - 1, 0))), long, "{sq}");
        assert_eq!(main(sq, Some((1000, reach))), long, "{sq}");
        assert_eq!(main(sq, Some((-1, 100))), long, "{sq}");
        assert_eq!(main(sq, None), "fa2_bwd_d128_bf16_long_sm80", "{sq}");
    }
    assert_eq!(main(4096, Some((reach, 0))), standard);
    // the rows the rule counts: the reach, at most the length; unbounded sides count none
    assert_eq!(rule_rows(8192, Some((1023, 0))), 1024);
    assert_eq!(rule_rows(100, Some((1023, 0))), 100);
    assert_eq!(rule_rows(8192, Some((u32::MAX, 0))), 8192);
    assert_eq!(rule_rows(8192, Some((u32::MAX, u32::MAX))), 8192);
    assert_eq!(rule_rows(8192, None), 8192);
}

/// Under 99 KiB every backward head dim plans: d96 and up on the main pass's compact row
/// (its own grid: 32-key blocks from d160), d224-d256 also on the dQ pass's in
/// deterministic mode, the long row giving way to the compact one, and each planned
/// kernel within the limit; with room for them, the standard rows, unchanged.
#[test]
fn small_shared_memory_takes_the_compact_rows() {
    let plan = |a: &BwdArgs, smem: u64| plan_bwd_on(a, Arch::Sm80, true, smem).unwrap();
    for d in [32, 64, 96, 128, 160, 192, 224, 256] {
        let a = args(1, 1000, 1000, 2, 2, d);
        let mut det = a;
        det.opts.deterministic = true;
        det.scratch.as_mut().unwrap().dq_accum = None;
        for a in [a, det] {
            let small = plan(&a, RTX);
            let big = plan(&a, 227 * 1024);
            for l in &small.launches {
                assert!(u64::from(l.spec.smem_bytes()) <= RTX, "{}", l.spec);
            }
            let main = small.launch(Pass::Bwd).unwrap();
            assert_eq!(
                main.spec.tiling.suffix() == "_compact",
                d >= 96,
                "{}",
                main.spec
            );
            let block_n = main.spec.tiles().block_n() as usize;
            assert_eq!(main.grid, [1000usize.div_ceil(block_n) as u32, 2, 1]);
            if let Some(dq) = small.launch(Pass::BwdDq) {
                assert_eq!(
                    dq.spec.tiling.suffix() == "_compact",
                    d >= 224,
                    "{}",
                    dq.spec
                );
            }
            for l in &big.launches {
                assert_eq!(l.spec.tiling.suffix(), "", "{}", l.spec);
            }
        }
    }
    // the long row (d128 from 8192 query rows) also gives way to the compact one
    let from = "fa2_bwd_d128_bf16_sm80"
        .parse::<KernelSpec>()
        .unwrap()
        .long_from()
        .unwrap();
    let long = args(1, from as usize, 1000, 2, 2, 128);
    let name = |smem| plan(&long, smem).launch(Pass::Bwd).unwrap().spec.name();
    assert_eq!(name(227 * 1024), "fa2_bwd_d128_bf16_long_sm80");
    assert_eq!(name(RTX), "fa2_bwd_d128_bf16_compact_sm80");
    // an A100's 163 KiB fits the long row (161 KiB)
    assert_eq!(name(163 * 1024), "fa2_bwd_d128_bf16_long_sm80");
}

/// An A100: 108 SMs, 163 KiB per block, 164 KiB per SM.
const A100: GpuFill = GpuFill {
    sms: 108,
    smem_optin: 163 * 1024,
    smem_per_sm: 164 * 1024,
};
/// An H100/H200: 132 SMs, 227 KiB per block, 228 KiB per SM.
const H100: GpuFill = GpuFill {
    sms: 132,
    smem_optin: 227 * 1024,
    smem_per_sm: 228 * 1024,
};

fn main_of(a: &BwdArgs, speed_rows: bool, gpu: GpuFill) -> String {
    let p = plan_bwd_fill(a, Arch::Sm80, speed_rows, gpu).unwrap();
    p.launch(Pass::Bwd).unwrap().spec.name()
}

/// By shared memory per SM: on an A100 the d64-d128 backward runs its compact row (two
/// CTAs of 4 warps per SM, not one), on its own grid; the long row (8 warps) stays; an
/// H100 keeps every standard row; a runtime without the speed-only rows' PTX too.
#[test]
fn a100_takes_the_rows_that_fill_its_sms() {
    for d in [64, 96, 128] {
        let a = args(1, 1000, 1000, 2, 2, d);
        let compact = format!("fa2_bwd_d{d}_bf16_compact_sm80");
        assert_eq!(main_of(&a, true, A100), compact);
        assert_eq!(main_of(&a, true, H100), format!("fa2_bwd_d{d}_bf16_sm80"));
        assert_eq!(main_of(&a, false, A100), format!("fa2_bwd_d{d}_bf16_sm80"));
        let p = plan_bwd_fill(&a, Arch::Sm80, true, A100).unwrap();
        let main = p.launch(Pass::Bwd).unwrap();
        let block_n = main.spec.tiles().block_n();
        assert_eq!(main.grid, [1000u32.div_ceil(block_n), 2, 1], "{compact}");
        let mut det = a;
        det.opts.deterministic = true;
        det.scratch.as_mut().unwrap().dq_accum = None;
        assert_eq!(main_of(&det, true, A100), compact);
    }
    let long = args(1, 8192, 1000, 2, 2, 128);
    assert_eq!(main_of(&long, true, A100), "fa2_bwd_d128_bf16_long_sm80");
    for (d, tiling) in [
        (32, ""),
        (160, ""),
        (192, ""),
        (224, "_compact"),
        (256, "_compact"),
    ] {
        let a = args(1, 1000, 1000, 2, 2, d);
        assert_eq!(
            main_of(&a, true, A100),
            format!("fa2_bwd_d{d}_bf16{tiling}_sm80")
        );
    }
}

/// `BwdOptions::tiling` fixes the main pass's row where the pass has it and it fits;
/// otherwise the call fails with a typed error that names the rows there are.
#[test]
fn fixed_tiling_is_checked() {
    let fixed = |d: usize, sq: usize, t: Tiling, det: bool, gpu: GpuFill| {
        let mut a = args(1, sq, 1000, 2, 2, d);
        a.opts = a.opts.with_tiling(t);
        if det {
            a.opts.deterministic = true;
            a.scratch.as_mut().unwrap().dq_accum = None;
        }
        plan_bwd_fill(&a, Arch::Sm80, true, gpu).map(|p| p.launch(Pass::Bwd).unwrap().spec.name())
    };
    assert_eq!(
        fixed(128, 1000, Tiling::Compact, false, H100).unwrap(),
        "fa2_bwd_d128_bf16_compact_sm80"
    );
    assert_eq!(
        fixed(128, 1000, Tiling::Long, false, H100).unwrap(),
        "fa2_bwd_d128_bf16_long_sm80"
    );
    assert_eq!(
        fixed(64, 1000, Tiling::Standard, false, A100).unwrap(),
        "fa2_bwd_d64_bf16_sm80"
    );
    let err = |r: Result<String, FlashError>| match r {
        Err(FlashError::InvalidParam(m)) => m,
        other => panic!("expected InvalidParam, got {other:?}"),
    };
    let m = err(fixed(64, 1000, Tiling::Long, false, H100));
    assert!(
        m.contains("no Long row") && m.contains("Standard, Compact"),
        "{m}"
    );
    let m = err(fixed(128, 9000, Tiling::Long, true, H100));
    assert!(m.contains("atomic mode"), "{m}");
    let rtx = GpuFill {
        smem_optin: 99 * 1024,
        smem_per_sm: 100 * 1024,
        ..H100
    };
    let m = err(fixed(256, 1000, Tiling::Standard, false, rtx));
    assert!(m.contains("shared memory per block"), "{m}");
    assert!(fixed(256, 1000, Tiling::Wide, false, H100).is_err());
}

/// The varlen backward by shared memory per SM: on an A100 (compute capability 8.0) d96
/// and d128 take their compact rows, d64 (66 KiB, two CTAs already) its standard one; on
/// an H100 (9.0) the wide rows stay; a fixed tiling is refused (it names dense rows).
#[test]
fn varlen_takes_the_rows_that_fill_its_sms() {
    use flash_runtime::validate::plan_bwd_varlen_fill;
    let v = validate_support::two_sequences();
    let main = |d: usize, cc: (u32, u32), gpu: GpuFill| {
        let mut a = args(1, 300, 400, 2, 2, d);
        a.scratch = None;
        let p = plan_bwd_varlen_fill(&a, &v, Arch::Sm80, cc, gpu).unwrap();
        p.launch(Pass::BwdVarlen).unwrap().spec.name()
    };
    assert_eq!(main(64, (8, 0), A100), "fa2_bwdvarlen_d64_bf16_sm80");
    for d in [96, 128] {
        assert_eq!(
            main(d, (8, 0), A100),
            format!("fa2_bwdvarlen_d{d}_bf16_compact_sm80")
        );
        assert_eq!(
            main(d, (8, 0), H100),
            format!("fa2_bwdvarlen_d{d}_bf16_sm80")
        );
        assert_eq!(
            main(d, (9, 0), H100),
            format!("fa2_bwdvarlen_d{d}_bf16_wide_sm80")
        );
    }
    let mut a = args(1, 300, 400, 2, 2, 128);
    a.scratch = None;
    a.opts = a.opts.with_tiling(Tiling::Compact);
    let err = plan_bwd_varlen_fill(&a, &v, Arch::Sm80, (9, 0), H100).unwrap_err();
    assert!(matches!(err, FlashError::InvalidParam(_)), "{err:?}");
}
