//! GPU (feature `gpu`, compute capability 9.0): the sm_90a forward's score transforms
//! (`fwd::Variant::scores`, through `FlashAttention::launch_fwd_sm90_scored`): softcap
//! (no mask, causal, a sliding window) and ALiBi (slopes `[heads]` and `[batch, heads]`,
//! no mask and causal) against the float64 reference (`reference::Modifiers`), beside the
//! sm_80 forward's error on the same inputs and modifiers (the 1.25x bar). Fresh random
//! inputs per case; o poisoned (NaN) with a guard band past its end and lse poisoned; odd
//! lengths, sq != sk both ways (rows with no key), GQA; both dtypes, d64 and d128; the
//! debug build (bounded mbarrier waits) first, then the release build; the shipping
//! schedule (with its TMA epilogue, `tma_store`) and the serial one; the softcap also with 1, 2 and 4 of every 4 n-tiles'
//! probabilities made on the FMA pipe (`fwd::Variant::fma_exp2`; 4: all of them, the
//! masked scores' exact zeros included); a causal softcap of 50 with q times 8, whose rows'
//! maxima jump between key blocks (the reference moves inside the clean blocks' loop).
//! The bf16 softcap on one fixed reference (`fwd::Variant::fixed_ref`) on both of its
//! arms (caps up to 56.8 and above), with rows whose every score lies near -cap.
//! Other GPUs: a notice.
#![cfg(feature = "gpu")]

mod gpu_support;

use flash_codegen::Scores;
use flash_runtime::reference::Modifiers;
use flash_runtime::{Alibi, AttnParams, Element, FlashAttention, ForwardArch, Mask, Sm90FwdShape};
use gpu_support::sm90::Sm90Case;

/// One case's modifiers: a cap, or ALiBi (per batch entry or not), with a mask.
#[derive(Clone, Copy, Debug)]
struct Mods {
    causal: bool,
    window: Option<(i32, i32)>,
    softcap: Option<f32>,
    alibi: Option<bool>,
    /// q's factor (a power of two): 8 makes the rows' maxima jump between key blocks, so
    /// the softmax's reference moves in the softcap's clean blocks too.
    amp: u16,
    /// Subtracted from q's elements and added to k's: 4 makes every score of every row
    /// large and negative (a softcap's `tanh` near -1: the fixed reference's lowest
    /// probabilities).
    shift: f32,
}

/// BLOOM's slopes for `h` heads, `2^(-8 (i + 1) / h)`, varied per batch entry.
fn slopes(b: usize, h: usize, per_batch: bool) -> Vec<f32> {
    let n = if per_batch { b } else { 1 };
    (0..n * h)
        .map(|i| (-8.0 * ((i % h) as f32 + 1.0) / h as f32).exp2() * (1.0 + (i / h) as f32 * 0.5))
        .collect()
}

/// (o rel-L2, lse max abs error) of the sm_90a kernel and of the sm_80 forward.
fn case<T: Element>(rt: &FlashAttention, sh: Sm90FwdShape, m: Mods, seed: u64) -> [(f64, f64); 2] {
    let mut c = Sm90Case::<T>::with_inputs(rt, sh, seed, (m.amp, m.shift));
    let (b, h) = (sh.batch, sh.heads);
    let sl = m.alibi.map(|per_batch| slopes(b, h, per_batch));
    let sl_d = sl.as_ref().map(|s| c.stream.clone_htod(s).unwrap());
    let alibi_arg = sl_d.as_ref().zip(m.alibi);
    rt.launch_fwd_sm90_scored(
        &c.stream,
        sh,
        (&c.q, &c.k, &c.v),
        &mut c.o,
        Some(&mut c.lse),
        (m.softcap, alibi_arg),
    )
    .unwrap_or_else(|e| panic!("{sh:?} {m:?}: {e}"));
    let (o, lse) = c.outputs();
    // the reference and the sm_80 forward with the same modifiers
    let mut mods = Modifiers::causal(m.causal);
    let mut params = if m.causal {
        AttnParams::causal()
    } else {
        AttnParams::new()
    };
    if let Some((l, r)) = m.window {
        mods = mods.with_window(l.into(), r.into());
        params = params.with_mask(Mask::Window { left: l, right: r });
    }
    if let Some(cap) = m.softcap {
        mods = mods.with_softcap(cap.into());
        params = params.with_softcap(cap);
    }
    if let Some(s) = &sl {
        mods = mods.with_alibi(s.iter().map(|&x| x.into()).collect());
    }
    if let (Some(s), Some(per_batch)) = (&sl_d, m.alibi) {
        params = params.with_alibi(match per_batch {
            true => Alibi::per_batch_head(s),
            false => Alibi::per_head(s),
        });
    }
    let r = c.reference(&mods);
    [c.errors(&r, (&o, &lse)), c.sm80_errors(rt, &params, &r)]
}

/// The runtime for these tests (the sm_80 forward as the baseline), or None (with a
/// notice) on a GPU other than compute capability 9.0.
fn runtime() -> Option<FlashAttention> {
    let mut rt = gpu_support::device();
    rt.set_forward_arch(ForwardArch::Sm80); // the baseline: the sm_80 kernels
    if rt.compute_capability() != (9, 0) {
        println!(
            "NOTICE: the sm_90a forward needs compute capability 9.0; this GPU is {:?}",
            rt.compute_capability()
        );
        return None;
    }
    Some(rt)
}

/// No modifier, no mask, q as drawn.
const NONE: Mods = Mods {
    causal: false,
    window: None,
    softcap: None,
    alibi: None,
    amp: 1,
    shift: 0.0,
};

/// The causal mask.
const CAUSAL: Mods = Mods {
    causal: true,
    ..NONE
};

/// A sliding window crossing block edges on both sides.
const WINDOW: Mods = Mods {
    window: Some((200, 17)),
    ..NONE
};

/// `m` with a softcap of `c`.
fn cap(c: f32, m: Mods) -> Mods {
    Mods {
        softcap: Some(c),
        ..m
    }
}

/// The softcap cases both tests run: caps that bite (0.7, and 5 under a window), 30
/// (causal), and 50 with q times 8 (the rows' maxima jump between key blocks).
fn softcaps() -> [Mods; 4] {
    [
        cap(0.7, NONE),
        cap(30.0, CAUSAL),
        cap(5.0, WINDOW),
        Mods {
            amp: 8,
            ..cap(50.0, CAUSAL)
        },
    ]
}

/// Fails the test with every recorded failure, if any.
fn assert_none(bad: &[String]) {
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Case shapes `(b, sq, sk, h, hk)`: odd lengths, sq != sk both ways, GQA.
const SHAPES: [(usize, usize, usize, usize, usize); 4] = [
    (2, 300, 300, 4, 2),
    (1, 700, 129, 4, 4),
    (2, 129, 700, 8, 1),
    (3, 1000, 1000, 2, 2),
];

/// (overlap, pingpong, persistent, dynamic): the shipping schedule, the serial one.
const SCHEDULES: [(bool, bool, bool, bool); 2] =
    [(true, true, true, true), (false, false, false, false)];

/// The problem of modifiers `m` at head dim `d` on `SHAPES[shape]`, with `schedule`
/// (its TMA epilogue on the dynamic grid, as the shipping kernels), the FMA share
/// `fma_exp2`, `fixed_ref` and `debug`.
fn shape_of(
    (shape, d, m): (usize, usize, &Mods),
    schedule: (bool, bool, bool, bool),
    (fma_exp2, fixed_ref, debug): (Option<u32>, bool, bool),
) -> Sm90FwdShape {
    let (b, sq, sk, h, hk) = SHAPES[shape % SHAPES.len()];
    let (overlap, pingpong, persistent, dynamic) = schedule;
    Sm90FwdShape {
        batch: b,
        seqlen_q: sq,
        seqlen_k: sk,
        heads: h,
        heads_k: hk,
        head_dim: d,
        causal: m.causal,
        window: m.window.map(|(l, r)| (l as u32, r as u32)),
        scores: match (m.softcap, m.alibi) {
            (Some(_), _) => Scores::Softcap,
            (_, Some(_)) => Scores::Alibi,
            _ => Scores::Plain,
        },
        fma_exp2,
        fixed_ref,
        overlap,
        pingpong,
        consumers: None,
        persistent,
        dynamic,
        chained: false,
        tma_store: dynamic,
        q_ahead: false,
        edge_masks: false,
        debug,
    }
}

/// Runs the case in f16 and bf16 (`bf16_only`: bf16), seeds from `seed` on; prints each
/// one's errors and records those over the bars (within 2e-2 (bf16) / 4e-3 (f16) and
/// 1.25x the sm_80 forward's o error, lse within 1e-3) in `bad`.
fn check(
    rt: &FlashAttention,
    (sh, m): (Sm90FwdShape, &Mods),
    bf16_only: bool,
    seed: &mut u64,
    bad: &mut Vec<String>,
) {
    for bf16 in [false, true].into_iter().filter(|&x| x || !bf16_only) {
        *seed += 1;
        let [(o, l), (o80, l80)] = if bf16 {
            case::<half::bf16>(rt, sh, *m, *seed)
        } else {
            case::<half::f16>(rt, sh, *m, *seed)
        };
        let tol = if bf16 { 2e-2 } else { 4e-3 };
        let ok = o <= tol && o <= 1.25 * o80.max(1e-4) && l <= 1e-3;
        let dt = if bf16 { "bf16" } else { "f16" };
        println!(
            "{dt} {m:?} {sh:?}: o rel-L2 {o:.2e} (sm80 {o80:.2e}) lse {l:.2e} (sm80 {l80:.2e}){}",
            if ok { "" } else { "  FAIL" }
        );
        if !ok {
            bad.push(format!(
                "{dt} {m:?} {sh:?}: o {o:.2e} (sm80 {o80:.2e}) lse {l:.2e}"
            ));
        }
    }
}

#[test]
fn sm90_scored_forward_matches_f64_reference() {
    let Some(rt) = runtime() else {
        return;
    };
    let alibi = |per_batch: bool, m: Mods| Mods {
        alibi: Some(per_batch),
        ..m
    };
    let mods: Vec<Mods> = softcaps()
        .into_iter()
        .chain([
            alibi(false, NONE),
            alibi(true, CAUSAL),
            alibi(false, CAUSAL),
        ])
        .collect();
    let mut bad = Vec::new();
    let mut seed = 100;
    for debug in [true, false] {
        for schedule in SCHEDULES {
            for d in [64, 128] {
                for (i, m, fma_exp2) in mods.iter().enumerate().flat_map(|(i, m)| {
                    let shares = match m.softcap {
                        Some(_) => vec![None, Some(1), Some(2), Some(4)],
                        None => vec![None],
                    };
                    shares.into_iter().map(move |s| (i, m, s))
                }) {
                    let sh = shape_of((i + d / 64, d, m), schedule, (fma_exp2, false, debug));
                    check(&rt, (sh, m), false, &mut seed, &mut bad);
                }
            }
        }
    }
    assert_none(&bad);
}

/// The bf16 softcap on a fixed reference (`fwd::Variant::fixed_ref`): caps on its fixed
/// arm (0.7, 5, 30, 50 with q x 8, 56: up to 56.8) and on its running-max arm (60,
/// 1000), rows whose every score lies near -cap (q - 4, k + 4: the reference's lowest
/// probabilities, down to 2^-97 at d64 and cap 56), each mask; the `ex2`s all by the
/// multi-function unit and a quarter of them on the FMA pipe (`fma_exp2` 1); the debug
/// build first, the shipping schedule and the serial one (GPU_FWD_SM90_SCORES_QUICK=1:
/// the release build's shipping schedule only).
#[test]
fn sm90_softcap_on_a_fixed_reference_matches_f64_reference() {
    let Some(rt) = runtime() else {
        return;
    };
    let low = |m: Mods| Mods { shift: 4.0, ..m };
    let mods: Vec<Mods> = softcaps()
        .into_iter()
        .chain([
            low(cap(56.0, CAUSAL)),
            low(cap(50.0, NONE)),
            low(cap(30.0, WINDOW)),
            cap(60.0, CAUSAL),
            low(cap(60.0, NONE)),
            cap(1000.0, WINDOW),
        ])
        .collect();
    let mut bad = Vec::new();
    let mut seed = 500;
    // GPU_FWD_SM90_SCORES_QUICK=1 (the sanitizer's run): the release build on the
    // shipping schedule only
    let quick = std::env::var("GPU_FWD_SM90_SCORES_QUICK").is_ok_and(|v| v == "1");
    let (debugs, schedules) = match quick {
        true => (&[false][..], &SCHEDULES[..1]),
        false => (&[true, false][..], &SCHEDULES[..]),
    };
    for &debug in debugs {
        for &schedule in schedules {
            for d in [64, 128] {
                for (i, m) in mods.iter().enumerate() {
                    // and a quarter of the `ex2`s on the FMA pipe
                    for share in [None, Some(1)] {
                        let sh = shape_of((i + d / 64, d, m), schedule, (share, true, debug));
                        check(&rt, (sh, m), true, &mut seed, &mut bad);
                    }
                }
            }
        }
    }
    assert_none(&bad);
}
