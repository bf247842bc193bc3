//! The sliding window's host checks and plans (no GPU): `AttnParams::with_window` plans
//! the dense forward on its `_local` kernel with the bounds as parameters (-1 as
//! `u32::MAX`), `(-1, 0)` and `(-1, -1)` on the causal and plain kernels; the varlen
//! forward and the backward (dense and varlen, both modes) plan their `_local` kernels
//! the same way, and the softcap on `_softcap` kernels in the backward's bwd and bwddq;
//! bounds below -1 and caps not finite and positive are typed errors.

use flash_codegen::abi::params_of;
use flash_codegen::{Arch, Mask, Pass, Scores};
use flash_runtime::validate::{
    BufDesc, FwdArgs, ParamValue, VarlenDesc, plan_bwd, plan_bwd_varlen, plan_fwd, plan_fwd_varlen,
};
use flash_runtime::{AttnParams, BwdOptions, FlashError};

mod validate_support;
use validate_support::{bwd_args, fwd_args};

fn fwd(b: usize, sq: usize, sk: usize, params: AttnParams<'static>) -> FwdArgs<'static> {
    fwd_args((b, sq, sk), params, None)
}

#[test]
fn windows_plan_the_local_kernel_with_their_bounds() {
    for ((l, r), want) in [
        ((100, 0), (100, 0)),
        ((-1, 3), (u32::MAX, 3)),
        ((7, -1), (7, u32::MAX)),
        ((0, 0), (0, 0)),
    ] {
        let p = plan_fwd(
            &fwd(2, 500, 700, AttnParams::new().with_window(l, r)),
            Arch::Sm80,
        )
        .unwrap();
        assert_eq!((p.spec.pass, p.spec.mask), (Pass::Fwd, Mask::Local));
        assert!(p.spec.name().contains("_local"), "{}", p.spec);
        let names: Vec<&str> = p.params.iter().map(|(n, _)| *n).collect();
        let abi: Vec<&str> = params_of(&p.spec).iter().map(|d| d.name).collect();
        assert_eq!(names, abi);
        assert_eq!(p.param("window_left"), Some(ParamValue::U32(want.0)));
        assert_eq!(p.param("window_right"), Some(ParamValue::U32(want.1)));
    }
    let causal = plan_fwd(
        &fwd(1, 64, 64, AttnParams::new().with_window(-1, 0)),
        Arch::Sm80,
    )
    .unwrap();
    assert_eq!(causal.spec.mask, Mask::Causal);
    assert!(causal.param("window_left").is_none());
    let plain = plan_fwd(
        &fwd(1, 64, 64, AttnParams::new().with_window(-1, -1)),
        Arch::Sm80,
    )
    .unwrap();
    assert_eq!(plain.spec.mask, Mask::None);
}

#[test]
fn bad_windows_are_errors_and_every_call_plans_its_window() {
    for (l, r) in [(-2, 0), (0, -5), (i32::MIN, i32::MIN)] {
        let e = plan_fwd(
            &fwd(1, 64, 64, AttnParams::new().with_window(l, r)),
            Arch::Sm80,
        )
        .unwrap_err();
        assert!(
            matches!(&e, FlashError::InvalidParam(m) if m.contains("-1 (unbounded)")),
            "{e}"
        );
    }
    let w = AttnParams::new().with_window(16, 0);
    // the backward, both modes: bwd and bwddq on their `_local` kernels with the bounds,
    // bwdpre and bwdpost plain
    let shapes = ([1, 64, 8, 128], [1, 64, 2, 128]);
    for opts in [BwdOptions::new(), BwdOptions::deterministic()] {
        let p = plan_bwd(&bwd_args(shapes, 8 * 64, None, (w, opts)), Arch::Sm80).unwrap();
        assert_eq!(p.launches.len(), 3);
        for l in &p.launches {
            let local = matches!(l.spec.pass, Pass::Bwd | Pass::BwdDq);
            assert_eq!(l.spec.mask == Mask::Local, local, "{}", l.spec);
            let names: Vec<&str> = l.params.iter().map(|(n, _)| *n).collect();
            let abi: Vec<&str> = params_of(&l.spec).iter().map(|d| d.name).collect();
            assert_eq!(names, abi, "{}", l.spec);
            let want = local.then_some((ParamValue::U32(16), ParamValue::U32(0)));
            let got = l.param("window_left").zip(l.param("window_right"));
            assert_eq!(got, want, "{}", l.spec);
        }
    }
    // ... and the softcap (with a window too): bwd and bwddq on their `_softcap` kernels
    // with the cap bound, bwdpre and bwdpost plain
    for capped in [
        AttnParams::causal().with_softcap(30.0),
        w.with_softcap(50.0),
    ] {
        for opts in [BwdOptions::new(), BwdOptions::deterministic()] {
            let p = plan_bwd(&bwd_args(shapes, 8 * 64, None, (capped, opts)), Arch::Sm80).unwrap();
            for l in &p.launches {
                let scored = matches!(l.spec.pass, Pass::Bwd | Pass::BwdDq);
                assert_eq!(l.spec.scores == Scores::Softcap, scored, "{}", l.spec);
                let names: Vec<&str> = l.params.iter().map(|(n, _)| *n).collect();
                let abi: Vec<&str> = params_of(&l.spec).iter().map(|d| d.name).collect();
                assert_eq!(names, abi, "{}", l.spec);
                let cap = capped.softcap.map(ParamValue::F32);
                assert_eq!(l.param("softcap"), cap.filter(|_| scored), "{}", l.spec);
            }
        }
    }
    let capped = AttnParams::causal().with_softcap(30.0);
    // the varlen forward has the window: its `_local` kernel, the bounds bound by name
    let vl = VarlenDesc {
        cu_seqlens_q: BufDesc {
            ptr: 0xc000_0000,
            len: 3,
        },
        cu_seqlens_k: BufDesc {
            ptr: 0xd000_0000,
            len: 3,
        },
        max_seqlen_q: 40,
        max_seqlen_k: 40,
    };
    let p = plan_fwd_varlen(&fwd(1, 64, 64, w), &vl, Arch::Sm80, u64::MAX).unwrap();
    assert_eq!((p.spec.pass, p.spec.mask), (Pass::FwdVarlen, Mask::Local));
    let names: Vec<&str> = p.params.iter().map(|(n, _)| *n).collect();
    let abi: Vec<&str> = params_of(&p.spec).iter().map(|d| d.name).collect();
    assert_eq!(names, abi);
    assert_eq!(p.param("window_left"), Some(ParamValue::U32(16)));
    assert_eq!(p.param("window_right"), Some(ParamValue::U32(0)));
    // ... the varlen backward too (its local kernels, the bounds bound; on cc 9.0 the
    // main pass's wide row), and a bad cap there is an error also when it is empty
    for cc in [(8, 0), (9, 0)] {
        let vbwd = bwd_args(shapes, 8 * 64, None, (w, BwdOptions::new()));
        let p = plan_bwd_varlen(&vbwd, &vl, Arch::Sm80, cc).unwrap();
        let main = p
            .launches
            .iter()
            .find(|l| l.spec.pass == Pass::BwdVarlen)
            .unwrap();
        assert_eq!(main.spec.mask, Mask::Local);
        assert_eq!(
            main.spec.tiling == flash_codegen::Tiling::Wide,
            cc == (9, 0)
        );
        assert_eq!(main.param("window_left"), Some(ParamValue::U32(16)));
    }
    let empty = VarlenDesc {
        max_seqlen_q: 0,
        ..vl
    };
    let bad_cap = AttnParams::causal().with_softcap(-1.0);
    let vcapped = bwd_args(shapes, 8 * 64, None, (bad_cap, BwdOptions::new()));
    let e = plan_bwd_varlen(&vcapped, &empty, Arch::Sm80, (8, 0)).unwrap_err();
    assert!(matches!(&e, FlashError::InvalidParam(_)), "{e}");
    // ... and a bad window is an error in the varlen forward, also when it is empty
    let bad = AttnParams::new().with_window(-3, 0);
    let e = plan_fwd_varlen(&fwd(1, 64, 64, bad), &empty, Arch::Sm80, u64::MAX).unwrap_err();
    assert!(matches!(&e, FlashError::InvalidParam(_)), "{e}");
    let no_keys = ([1, 64, 8, 128], [1, 0, 2, 128]);
    let e = plan_bwd(
        &bwd_args(no_keys, 8 * 64, None, (bad_cap, BwdOptions::new())),
        Arch::Sm80,
    )
    .unwrap_err();
    assert!(
        matches!(&e, FlashError::InvalidParam(m) if m.contains("finite and > 0")),
        "{e}"
    );
    let p = plan_bwd(
        &bwd_args(no_keys, 8 * 64, None, (capped, BwdOptions::new())),
        Arch::Sm80,
    )
    .unwrap();
    assert!(p.launches.is_empty());
    let bad = AttnParams::new().with_window(-7, 0);
    let e = plan_bwd(
        &bwd_args(no_keys, 8 * 64, None, (bad, BwdOptions::new())),
        Arch::Sm80,
    )
    .unwrap_err();
    assert!(
        matches!(&e, FlashError::InvalidParam(m) if m.contains("-1 (unbounded)")),
        "{e}"
    );
    // lengths whose sum the kernel's i32 window arithmetic cannot hold
    let e = plan_fwd(&fwd(1, 1 << 30, 1 << 30, w), Arch::Sm80).unwrap_err();
    assert!(
        matches!(&e, FlashError::InvalidParam(m) if m.contains("below 2^31")),
        "{e}"
    );
    let p = plan_fwd(&fwd(1, 1 << 29, 1 << 30, w), Arch::Sm80).unwrap();
    assert_eq!(p.spec.mask, Mask::Local);
}
