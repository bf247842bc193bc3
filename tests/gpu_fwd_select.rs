//! GPU (feature `gpu`, compute capability 9.0): `forward_into`'s kernel choice
//! (`ForwardArch`). On the calls the sm_90a forward takes, Auto (which runs it) and a
//! runtime forced onto sm_80 run the same inputs, both checked against the float64
//! reference (Auto at most 1.25x sm_80's o error, tests/gpu_fwd_sm90.rs's bar), and forced
//! Sm90a must write Auto's bits: q, k, v strided (views into a packed `[b, s, 3, h, d]` qkv
//! buffer, PyTorch `[b, h, s, d]` storage through `from_bhsd`, padded strides), GQA 16:1,
//! sq != sk both ways, seqlen_q 1, causal and not, d64 and d128, both dtypes, a custom
//! scale, with and without lse; o (in the inputs' layout) and lse NaN-poisoned with a
//! guard band that must stay untouched; `forward_kernel_name` names an sm_90a entry.
//! Fallbacks: d96 and a softcapped d256 run (and name) the sm_80 kernel under Auto, bit for bit
//! as forced Sm80, and forced Sm90a refuses them with `FlashError::ArchUnavailable`; so
//! do no keys and a lowered compute capability; an empty call launches nothing.
//! Other GPUs: a notice.
#![cfg(feature = "gpu")]

mod fwd_select_support;
mod gpu_support;

use flash_codegen::DType;
use flash_runtime::{Element, FlashAttention, FlashError, ForwardArch, Tensor4, Tensor4Mut};
use fwd_select_support::{Case, Layout, Res, bits, params, setup};
use gpu_support::{assert_no_failures, o_tol};

/// The runtimes of the test: Auto, forced Sm80, forced Sm90a.
struct Rts {
    auto: FlashAttention,
    sm80: FlashAttention,
    sm90a: FlashAttention,
}

/// The GPU's own runtime on `arch` (not gpu_support's `device()`: its shared-memory
/// emulation would change what the sm_90a forward takes).
fn runtime(arch: ForwardArch) -> FlashAttention {
    let mut rt = FlashAttention::on_device(0).unwrap_or_else(|e| panic!("needs a GPU: {e}"));
    rt.set_forward_arch(arch);
    rt
}

/// A case the sm_90a forward takes; its problems.
fn sm90_case<T: Element>(rts: &Rts, c: Case, seed: u64) -> Res<Vec<String>> {
    let stream = rts.auto.context().default_stream();
    let s = setup::<T>(&stream, c, seed)?;
    let p = params(&c);
    let mut problems = Vec::new();
    let (name, name80) = (
        s.name(&rts.auto, &stream, &p)?,
        s.name(&rts.sm80, &stream, &p)?,
    );
    let problem = format!("_d{}_{}", c.d, c.dtype.name());
    let causal_name = name.contains("_causal");
    if !(name.contains(&problem) && name.ends_with("_sm90a") && causal_name == c.causal) {
        problems.push(format!("Auto names {name}, not an sm_90a entry"));
    }
    if !name80.ends_with("_sm80") {
        problems.push(format!("Sm80 names {name80}"));
    }
    let (auto, sm80) = (
        s.run(&rts.auto, &stream, &p)?,
        s.run(&rts.sm80, &stream, &p)?,
    );
    let (mut pa, mut p80) = (Vec::new(), Vec::new());
    let want = s.reference()?;
    let ((o, l), (o80, l80)) = (
        s.check(&auto, &want, &mut pa),
        s.check(&sm80, &want, &mut p80),
    );
    problems.extend(pa.into_iter().map(|x| format!("Auto: {x}")));
    problems.extend(p80.into_iter().map(|x| format!("Sm80: {x}")));
    let tol = if c.dtype == DType::Bf16 { 2e-2 } else { 4e-3 };
    if !(o <= tol && o <= 1.25 * o80.max(1e-4)) {
        problems.push(format!("Auto o rel-L2 {o:.2e}, sm_80's {o80:.2e}"));
    }
    if o80 > o_tol(c.dtype) {
        problems.push(format!("Sm80 o rel-L2 {o80:.2e} > {:.0e}", o_tol(c.dtype)));
    }
    if bits(&s.run(&rts.sm90a, &stream, &p)?) != bits(&auto) {
        problems.push("forced Sm90a wrote other bits than Auto".into());
    }
    println!("{c:?}: {name} o {o:.2e} lse {l:.2e}; {name80} o {o80:.2e} lse {l80:.2e}");
    Ok(problems)
}

#[test]
fn auto_runs_sm90a_where_it_applies() {
    let rts = Rts {
        auto: runtime(ForwardArch::Auto),
        sm80: runtime(ForwardArch::Sm80),
        sm90a: runtime(ForwardArch::Sm90a),
    };
    if rts.auto.compute_capability() != (9, 0) {
        println!(
            "NOTICE: the sm_90a forward needs compute capability 9.0; this GPU is {:?}",
            rts.auto.compute_capability()
        );
        return;
    }
    use Layout::*;
    // (b, sq, sk, h, hk, layout, scale, lse)
    let shapes = [
        (2, 300, 300, 4, 4, Packed, None, true),
        (1, 513, 513, 2, 2, Packed, Some(0.3), false),
        (2, 257, 700, 4, 2, Bhsd, None, true),       // sq < sk
        (1, 700, 129, 2, 1, Bhsd, None, true),       // sq > sk: causal rows without keys
        (1, 1, 1000, 16, 1, Contiguous, None, true), // decode row, GQA 16:1
        (2, 200, 333, 16, 1, Padded, None, true),    // GQA 16:1, padded strides
        (1, 1000, 1000, 2, 2, Bhsd, Some(0.2), true),
    ];
    let mut failures = Vec::new();
    let mut seed = 0x5e1ec7;
    for (b, sq, sk, h, hk, layout, scale, lse) in shapes {
        let variants = [64, 128].into_iter().flat_map(|d| {
            (DType::ALL.into_iter()).flat_map(move |t| [false, true].map(|c| (d, t, c)))
        });
        for (d, dtype, causal) in variants {
            let c = Case {
                b,
                sq,
                sk,
                h,
                hk,
                d,
                dtype,
                causal,
                layout,
                scale,
                lse,
            };
            seed += 1;
            let res = match dtype {
                DType::F16 => sm90_case::<half::f16>(&rts, c, seed),
                DType::Bf16 => sm90_case::<half::bf16>(&rts, c, seed),
            };
            match res {
                Ok(p) if p.is_empty() => {}
                Ok(p) => failures.push(format!("{c:?}: {}", p.join("; "))),
                Err(e) => failures.push(format!("{c:?}: error {e}")),
            }
        }
    }
    assert_no_failures(&failures);
}

/// `e` is `ArchUnavailable` saying `why`.
fn refused(e: FlashError, why: &str, problems: &mut Vec<String>) {
    let msg = e.to_string();
    if !(matches!(e, FlashError::ArchUnavailable { .. }) && msg.contains(why)) {
        problems.push(format!(
            "forced Sm90a: {msg}, not ArchUnavailable with `{why}`"
        ));
    }
}

#[test]
fn auto_falls_back_to_sm80_and_forced_sm90a_says_why() {
    let rts = Rts {
        auto: runtime(ForwardArch::Auto),
        sm80: runtime(ForwardArch::Sm80),
        sm90a: runtime(ForwardArch::Sm90a),
    };
    if rts.auto.compute_capability() != (9, 0) {
        println!("NOTICE: the sm_90a forward's selection needs compute capability 9.0");
        return;
    }
    let stream = rts.auto.context().default_stream();
    let base = Case {
        b: 1,
        sq: 300,
        sk: 500,
        h: 4,
        hk: 2,
        d: 96,
        dtype: DType::Bf16,
        causal: true,
        layout: Layout::Bhsd,
        scale: None,
        lse: true,
    };
    let mut problems = Vec::new();
    // d96, then a softcap at d256: Auto runs sm_80, bit for bit as forced Sm80 (the
    // sm_90a softcap kernels: tests/gpu_fwd_sm90_scores.rs, tests/gpu_window.rs)
    let softcap = Case {
        d: 256,
        layout: Layout::Packed,
        sk: 300,
        hk: 4,
        ..base
    };
    let cases = [
        (
            base,
            params(&base),
            "head dim 96: the sm_90a forward takes 64 and 128",
        ),
        (
            softcap,
            params(&softcap).with_softcap(50.0),
            "head dim 256: the sm_90a forward takes 64 and 128",
        ),
    ];
    for (i, (c, p, why)) in cases.into_iter().enumerate() {
        let s = setup::<half::bf16>(&stream, c, 77 + i as u64).unwrap();
        let name = s.name(&rts.auto, &stream, &p).unwrap();
        if !name.ends_with("_sm80") {
            problems.push(format!("{c:?}: Auto names {name}, not an sm_80 entry"));
        }
        let auto = s.run(&rts.auto, &stream, &p).unwrap();
        if bits(&auto) != bits(&s.run(&rts.sm80, &stream, &p).unwrap()) {
            problems.push(format!("{c:?}: Auto and Sm80 differ"));
        }
        if p.softcap.is_none() {
            let mut found = Vec::new();
            let (o, _) = s.check(&auto, &s.reference().unwrap(), &mut found);
            if o > o_tol(c.dtype) {
                found.push(format!("o rel-L2 {o:.2e}"));
            }
            problems.extend(found.into_iter().map(|x| format!("{c:?}: {x}")));
        }
        let [q, k, v] = s.views();
        match rts.sm90a.forward_kernel_name(&stream, &q, &k, &v, &p) {
            Ok(n) => problems.push(format!("{c:?}: forced Sm90a names {n:?}")),
            Err(e) => refused(e, why, &mut problems),
        }
        match s.run(&rts.sm90a, &stream, &p) {
            Ok(_) => problems.push(format!("{c:?}: forced Sm90a ran")),
            Err(e) => match e.downcast::<FlashError>() {
                Ok(e) => refused(*e, why, &mut problems),
                Err(e) => problems.push(format!("{c:?}: {e}")),
            },
        }
    }
    // no keys: sm_80 (o = 0, lse = -inf); a runtime planning for 8.9: sm_80
    let d128 = Case { d: 128, ..base };
    let s = setup::<half::bf16>(&stream, d128, 99).unwrap();
    let [q, k, v] = s.views();
    let (p, none) = (
        params(&d128),
        Tensor4::strided(s.bufs[1].slice(..), [1, 0, 2, 128], [0, 256, 128, 1]),
    );
    let name = rts.auto.forward_kernel_name(&stream, &q, &none, &none, &p);
    if !name
        .as_ref()
        .is_ok_and(|n| n.as_ref().is_some_and(|n| n.ends_with("_sm80")))
    {
        problems.push(format!("no keys: Auto names {name:?}"));
    }
    match rts.sm90a.forward_kernel_name(&stream, &q, &none, &none, &p) {
        Ok(n) => problems.push(format!("no keys: forced Sm90a names {n:?}")),
        Err(e) => refused(e, "seqlen_k 0", &mut problems),
    }
    let mut lowered = runtime(ForwardArch::Sm90a);
    lowered.limit_compute_capability(8, 9);
    match lowered.forward_kernel_name(&stream, &q, &k, &v, &p) {
        Ok(n) => problems.push(format!("at 8.9: forced Sm90a names {n:?}")),
        Err(e) => refused(e, "compute capability 8.9", &mut problems),
    }
    lowered.set_forward_arch(ForwardArch::Auto);
    let name = lowered.forward_kernel_name(&stream, &q, &k, &v, &p);
    if !name
        .as_ref()
        .is_ok_and(|n| n.as_ref().is_some_and(|n| n.ends_with("_sm80")))
    {
        problems.push(format!("at 8.9: Auto names {name:?}"));
    }
    // an empty call launches nothing, whatever the choice
    let empty = |s_len: usize, h: usize| {
        Tensor4::strided(
            s.bufs[0].slice(..),
            [0, s_len, h, 128],
            [0, h * 128, 128, 1],
        )
    };
    let (eq, ek) = (empty(300, 4), empty(500, 2));
    let name = rts.sm90a.forward_kernel_name(&stream, &eq, &ek, &ek, &p);
    if !matches!(name, Ok(None)) {
        problems.push(format!("empty: forced Sm90a names {name:?}"));
    }
    let mut o_buf = stream.alloc_zeros::<half::bf16>(8).unwrap();
    let mut o = Tensor4Mut::strided(o_buf.slice_mut(..), [0, 300, 4, 128], [0, 512, 128, 1]);
    if let Err(e) = rts
        .sm90a
        .forward_into(&stream, &eq, &ek, &ek, &mut o, None, &p)
    {
        problems.push(format!("empty: forced Sm90a: {e}"));
    }
    assert_no_failures(&problems);
}
