//! The sm_90a forward's rule on the modifiers: windows (normalised, or the local kernel),
//! a custom scale, the softcap and ALiBi (their kernels and launch values), and each
//! refusal's reason.

use flash_codegen::Scores;

use super::super::*;
use super::{BASE, H100, assert_refuses, bf16_128};
use crate::params::{AttnParams, Mask};
use crate::validate::{AlibiDesc, BufDesc};

#[test]
fn windows_equal_to_none_or_causal_run_as_those() {
    for (left, right, causal) in [(-1, -1, false), (-1, 0, true)] {
        let mut a = bf16_128();
        a.params = AttnParams::new().with_window(left, right);
        let call = sm90_fwd_call(&a, H100).expect("eligible");
        assert_eq!(call.shape.causal, causal, "({left}, {right})");
    }
}

/// Any other window runs the window's kernel, its bounds as the kernel takes them (-1 as
/// `u32::MAX`).
#[test]
fn sliding_windows_run_the_local_kernel() {
    for (left, right, want) in [
        (4095, 0, (4095, 0)),
        (-1, 7, (u32::MAX, 7)),
        (0, 0, (0, 0)),
        (256, -1, (256, u32::MAX)),
    ] {
        let mut a = bf16_128();
        a.params = AttnParams::new().with_mask(Mask::Window { left, right });
        let call = sm90_fwd_call(&a, H100).expect("eligible");
        assert_eq!(
            call.variant.name(),
            "fa3_fwd_d128_bf16_local_ovl_pp_m128_dyn_tst_sm90a"
        );
        assert!(!call.shape.causal && call.variant.window);
        assert_eq!(call.shape.window, Some(want), "({left}, {right})");
    }
}

#[test]
fn a_custom_scale_is_passed_on() {
    let mut a = bf16_128();
    a.params = AttnParams::new().with_scale(0.3);
    let call = sm90_fwd_call(&a, H100).expect("eligible");
    let want = (f64::from(0.3f32) * std::f64::consts::LOG2_E) as f32;
    assert_eq!(call.scale_log2, want);
}

/// ALiBi's slopes at `ptr`: `len` f32, `[batch, heads]` with `per_batch`.
fn with_slopes(mut a: FwdArgs<'static>, ptr: u64, len: usize, per_batch: bool) -> FwdArgs<'static> {
    a.alibi = Some(AlibiDesc {
        slopes: BufDesc { ptr, len },
        per_batch,
    });
    a
}

/// A softcap runs the softcap kernel of the call's mask (none, causal, a window), its cap
/// passed on.
#[test]
fn a_softcap_runs_the_softcap_kernel_of_each_mask() {
    for (mask, want) in [
        (
            Mask::None,
            "fa3_fwd_d128_bf16_softcap_ovl_pp_m128_dyn_tst_sm90a",
        ),
        (
            Mask::Causal,
            "fa3_fwd_d128_bf16_causal_softcap_ovl_pp_m128_dyn_tst_sm90a",
        ),
        (
            Mask::Window {
                left: 255,
                right: 0,
            },
            "fa3_fwd_d128_bf16_local_softcap_ovl_pp_m128_dyn_tst_sm90a",
        ),
    ] {
        let mut a = bf16_128();
        a.params = AttnParams::new().with_mask(mask).with_softcap(30.0);
        let call = sm90_fwd_call(&a, H100).expect("eligible");
        assert_eq!(call.variant.name(), want);
        assert_eq!(call.shape.scores, Scores::Softcap);
        assert_eq!(call.scores.softcap, 30.0);
        assert_eq!(
            (call.scores.slopes, call.scores.slopes_batch_stride),
            (0, 0)
        );
    }
}

/// ALiBi runs the ALiBi kernel (no mask or causal), its slopes' pointer passed on and the
/// batch stride 0 for `[heads]`, heads for `[batch, heads]`.
#[test]
fn alibi_runs_the_alibi_kernel_with_its_slopes() {
    for (causal, per_batch, len, stride) in [(false, false, 8, 0), (true, true, 16, 8)] {
        let mut a = with_slopes(bf16_128(), BASE + (5 << 30), len, per_batch);
        if causal {
            a.params = AttnParams::causal();
        }
        let call = sm90_fwd_call(&a, H100).expect("eligible");
        let mask = if causal { "_causal" } else { "" };
        assert_eq!(
            call.variant.name(),
            format!("fa3_fwd_d128_bf16{mask}_alibi_ovl_pp_m128_dyn_tst_sm90a")
        );
        assert_eq!(call.shape.scores, Scores::Alibi);
        assert_eq!(call.scores.slopes, BASE + (5 << 30));
        assert_eq!(call.scores.slopes_batch_stride, stride);
        assert_eq!(call.scores.softcap, 0.0);
    }
}

#[test]
fn modifiers_the_kernel_lacks_refuse() {
    let slopes = BASE + (5 << 30);
    let mut a = with_slopes(bf16_128(), slopes, 8, false);
    a.params = AttnParams::causal().with_softcap(50.0);
    assert_refuses(&a, H100, "ALiBi and a softcap together");

    let mut a = with_slopes(bf16_128(), slopes, 8, false);
    a.params = AttnParams::new().with_mask(Mask::Window { left: 64, right: 0 });
    assert_refuses(&a, H100, "ALiBi under a sliding window");

    for (len, per_batch) in [(7, false), (16, false), (8, true)] {
        let a = with_slopes(bf16_128(), slopes, len, per_batch);
        assert_refuses(&a, H100, "ALiBi slopes");
    }
    for ptr in [0, slopes + 2] {
        let a = with_slopes(bf16_128(), ptr, 8, false);
        assert_refuses(&a, H100, "4-byte aligned pointer");
    }

    for cap in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let mut a = bf16_128();
        a.params = AttnParams::new().with_softcap(cap);
        assert_refuses(&a, H100, "the sm_90a forward takes a positive, finite cap");
    }

    let mut a = bf16_128();
    a.params = AttnParams::new().with_mask(Mask::Window { left: -2, right: 0 });
    assert_refuses(&a, H100, "each bound must be -1 (unbounded)");

    for s in [f32::NAN, -1.0, 0.0, f32::INFINITY] {
        let mut a = bf16_128();
        a.params = AttnParams::new().with_scale(s);
        assert_refuses(&a, H100, "softmax scale");
    }
}
