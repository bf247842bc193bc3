//! ALiBi's host checks and plans (no GPU): slopes given to the dense forward plan its
//! `_alibi` kernel with `alibi_slopes` and `alibi_batch_stride` last (0 for `[heads]`,
//! `heads` for `[batch, heads]`); the backward (both modes) plans bwd and bwddq on theirs,
//! bwdpre and bwdpost plain, the long row where the plain backward takes it; slopes of the
//! wrong length, null or misaligned, with a softcap or under a window are typed errors;
//! the varlen forward checks `[batch, heads]` against its sequences.

use flash_codegen::abi::params_of;
use flash_codegen::{Arch, Mask, Pass, Scores, Tiling};
use flash_runtime::validate::{
    AlibiDesc, BufDesc, BwdArgs, FwdArgs, ParamValue, plan_bwd, plan_fwd, plan_fwd_varlen,
};
use flash_runtime::{AttnParams, BwdOptions, FlashError};

mod validate_support;
use validate_support::{bwd_args, fwd_args};

const SLOPES: u64 = 0xa000_0000;

fn slopes(len: usize, per_batch: bool) -> Option<AlibiDesc> {
    Some(AlibiDesc {
        slopes: BufDesc { ptr: SLOPES, len },
        per_batch,
    })
}

/// A forward of `b` x 8 query heads over 2 kv heads, d128, with `alibi`.
fn fwd(
    lens: (usize, usize, usize),
    params: AttnParams<'static>,
    alibi: Option<AlibiDesc>,
) -> FwdArgs<'static> {
    fwd_args(lens, params, alibi)
}

fn bwd(sq: usize, det: bool, alibi: Option<AlibiDesc>) -> BwdArgs<'static> {
    let opts = match det {
        true => BwdOptions::deterministic(),
        false => BwdOptions::new(),
    };
    let (qs, ks) = ([2, sq, 8, 128], [2, sq, 2, 128]);
    let a = bwd_args((qs, ks), 2 * 8 * sq, None, (AttnParams::causal(), opts));
    BwdArgs { alibi, ..a }
}

#[test]
fn slopes_plan_the_alibi_kernels_with_their_pointer_and_stride() {
    for (causal, per_batch, len, stride) in [(false, false, 8, 0), (true, true, 24, 8)] {
        let p = if causal {
            AttnParams::causal()
        } else {
            AttnParams::new()
        };
        let plan = plan_fwd(&fwd((3, 500, 700), p, slopes(len, per_batch)), Arch::Sm80).unwrap();
        assert_eq!(plan.spec.scores, Scores::Alibi);
        assert_eq!(plan.spec.mask, Mask::causal(causal));
        assert!(plan.spec.name().ends_with("_alibi_sm80"), "{}", plan.spec);
        let names: Vec<&str> = plan.params.iter().map(|(n, _)| *n).collect();
        let abi: Vec<&str> = params_of(&plan.spec).iter().map(|d| d.name).collect();
        assert_eq!(names, abi);
        assert_eq!(
            &names[names.len() - 2..],
            ["alibi_slopes", "alibi_batch_stride"]
        );
        assert_eq!(plan.param("alibi_slopes"), Some(ParamValue::U64(SLOPES)));
        assert_eq!(
            plan.param("alibi_batch_stride"),
            Some(ParamValue::U32(stride))
        );
    }
    let plain = plan_fwd(&fwd((1, 64, 64), AttnParams::new(), None), Arch::Sm80).unwrap();
    assert_eq!(plain.spec.scores, Scores::Plain);
    assert!(plain.param("alibi_slopes").is_none());
}

#[test]
fn the_backward_plans_bwd_and_bwddq_on_alibi_kernels_at_every_length() {
    for (sq, det, long) in [
        (300, false, false),
        (300, true, false),
        (16384, false, true),
    ] {
        let plan = plan_bwd(&bwd(sq, det, slopes(8, false)), Arch::Sm80).unwrap();
        for l in &plan.launches {
            let scored = matches!(l.spec.pass, Pass::Bwd | Pass::BwdDq);
            let want = if scored { Scores::Alibi } else { Scores::Plain };
            assert_eq!(l.spec.scores, want, "{}", l.spec);
            let tiling = match long && l.spec.pass == Pass::Bwd {
                true => Tiling::Long,
                false => Tiling::Standard,
            };
            assert_eq!(l.spec.tiling, tiling, "{}", l.spec);
            let names: Vec<&str> = l.params.iter().map(|(n, _)| *n).collect();
            let abi: Vec<&str> = params_of(&l.spec).iter().map(|d| d.name).collect();
            assert_eq!(names, abi);
            if scored {
                assert_eq!(l.param("alibi_slopes"), Some(ParamValue::U64(SLOPES)));
                assert_eq!(l.param("alibi_batch_stride"), Some(ParamValue::U32(0)));
            }
        }
    }
}

#[test]
fn bad_slopes_and_missing_kernels_are_typed_errors() {
    let shape = |r: Result<(), FlashError>, what: &str| match r {
        Err(FlashError::ShapeMismatch(m)) => assert!(m.contains("ALiBi slopes"), "{what}: {m}"),
        other => panic!("{what}: want ShapeMismatch, got {other:?}"),
    };
    let invalid = |r: Result<(), FlashError>, what: &str, has: &str| match r {
        Err(FlashError::InvalidParam(m)) => assert!(m.contains(has), "{what}: {m}"),
        other => panic!("{what}: want InvalidParam, got {other:?}"),
    };
    let plan = |p: AttnParams<'static>, a| plan_fwd(&fwd((3, 64, 64), p, a), Arch::Sm80);
    let unit = |p: AttnParams<'static>, a| plan(p, a).map(|_| ());
    shape(
        unit(AttnParams::new(), slopes(7, false)),
        "7 slopes, 8 heads",
    );
    shape(
        unit(AttnParams::new(), slopes(24, false)),
        "[b, h] given as [h]",
    );
    shape(
        unit(AttnParams::new(), slopes(8, true)),
        "[h] given as [b, h]",
    );
    let bad_bwd = plan_bwd(&bwd(64, false, slopes(9, false)), Arch::Sm80);
    shape(bad_bwd.map(|_| ()), "backward");
    for ptr in [0, SLOPES + 2] {
        let a = Some(AlibiDesc {
            slopes: BufDesc { ptr, len: 8 },
            per_batch: false,
        });
        match plan(AttnParams::new(), a) {
            Err(FlashError::Misaligned { tensor, .. }) => assert_eq!(tensor, "alibi_slopes"),
            other => panic!("pointer {ptr:#x}: want Misaligned, got {other:?}"),
        }
    }
    let a = slopes(8, false);
    let capped = AttnParams::new().with_softcap(30.0);
    invalid(unit(capped, a), "softcap", "ALiBi and a softcap");
    invalid(
        unit(AttnParams::new().with_window(64, 0), a),
        "window",
        "sliding window",
    );
    // (a window that is the causal mask runs the causal ALiBi kernel)
    let causal = plan(AttnParams::new().with_window(-1, 0), a).unwrap();
    assert_eq!(causal.spec.name(), "fa2_fwd_d128_bf16_causal_alibi_sm80");
}

/// The varlen calls check `[batch, heads]` slopes against their sequences and plan their
/// `_alibi` kernels with the dense stride (`heads`: the kernels index by sequence).
#[test]
fn varlen_calls_plan_alibi_per_sequence() {
    // 3 sequences packed into 500 queries / 700 keys
    let vd = flash_runtime::validate::VarlenDesc {
        cu_seqlens_q: BufDesc {
            ptr: 0xb000_0000,
            len: 4,
        },
        cu_seqlens_k: BufDesc {
            ptr: 0xc000_0000,
            len: 4,
        },
        max_seqlen_q: 300,
        max_seqlen_k: 400,
    };
    let packed = |a| fwd((1, 500, 700), AttnParams::causal(), a);
    for (len, per_batch, stride) in [(8, false, 0), (24, true, 8)] {
        let p = plan_fwd_varlen(&packed(slopes(len, per_batch)), &vd, Arch::Sm80, u64::MAX);
        let p = p.unwrap();
        assert_eq!(p.spec.name(), "fa2_fwdvarlen_d128_bf16_causal_alibi_sm80");
        assert_eq!(p.param("alibi_slopes"), Some(ParamValue::U64(SLOPES)));
        assert_eq!(p.param("alibi_batch_stride"), Some(ParamValue::U32(stride)));
        let names: Vec<&str> = p.params.iter().map(|(n, _)| *n).collect();
        let abi: Vec<&str> = params_of(&p.spec).iter().map(|d| d.name).collect();
        assert_eq!(names, abi);
    }
    // [batch, heads] is the sequences' count, not the packed tensors' batch of 1
    for len in [8 * 2, 8 * 4] {
        match plan_fwd_varlen(&packed(slopes(len, true)), &vd, Arch::Sm80, u64::MAX) {
            Err(FlashError::ShapeMismatch(m)) => assert!(m.contains("batch 3"), "{m}"),
            other => panic!("{len} slopes: want ShapeMismatch, got {other:?}"),
        }
    }
}

#[path = "kvcache_support/mod.rs"]
mod kvcache_support;

/// The KV-cache forward plans its split kernel's `_alibi` twin (no prefill row: a chunked
/// prefill's 1600 packed rows run the long one), the slopes after the window's and the
/// softcap's place, checked against the batch; the combine stays plain.
#[test]
fn kvcache_calls_plan_the_alibi_split_kernel() {
    let plain = kvcache_support::plan(&kvcache_support::args(2, 200, 4096, 8, 1, 128)).unwrap();
    assert_eq!(plain.split.spec.tiling, Tiling::Prefill);
    for (len, per_batch, stride) in [(8, false, 0), (16, true, 8)] {
        let a = flash_runtime::validate::KvArgs {
            alibi: slopes(len, per_batch),
            ..kvcache_support::args(2, 200, 4096, 8, 1, 128)
        };
        let p = kvcache_support::plan(&a).unwrap();
        assert_eq!(p.split.spec.scores, Scores::Alibi);
        assert_eq!(p.split.spec.tiling, Tiling::Long, "{}", p.split.spec);
        assert_eq!(p.split.param("alibi_slopes"), Some(ParamValue::U64(SLOPES)));
        assert_eq!(
            p.split.param("alibi_batch_stride"),
            Some(ParamValue::U32(stride))
        );
        let names: Vec<&str> = p.split.params.iter().map(|(n, _)| *n).collect();
        let abi: Vec<&str> = params_of(&p.split.spec).iter().map(|d| d.name).collect();
        assert_eq!(names, abi);
        if let Some(c) = &p.combine {
            assert_eq!(c.spec.scores, Scores::Plain);
        }
    }
    let a = flash_runtime::validate::KvArgs {
        alibi: slopes(24, true),
        ..kvcache_support::args(2, 1, 4096, 8, 1, 128)
    };
    match kvcache_support::plan(&a) {
        Err(FlashError::ShapeMismatch(m)) => assert!(m.contains("batch 2"), "{m}"),
        other => panic!("24 slopes for batch 2 x 8 heads: want ShapeMismatch, got {other:?}"),
    }
}
