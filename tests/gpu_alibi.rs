//! GPU (feature `gpu`): ALiBi (`AttnParams::with_alibi`, the `_alibi` kernels) against the
//! f64 reference (`reference::Modifiers::with_alibi`: `-slope * |i + sk - sq - j|` on the
//! scaled score): the dense forward (o and lse NaN-poisoned with NaN guard bands past
//! their ends) and the backward in both modes (deterministic mode run twice, bitwise
//! equal), on our own forward's o and lse. Slopes `[heads]` and `[batch, heads]`: BLOOM's
//! geometric ones, steep ones that leave a query a few keys (1.0 per key), zero slopes;
//! no mask and causal, sq != sk both ways, GQA and MQA, both dtypes, every kernel head
//! dim and 40 (columns past d), the d256 forward on the 99 KiB compact kernels, a long
//! backward (8192 queries, atomic mode: the d128 long row). ALiBi with a softcap or a
//! window (no kernel) and slopes of the wrong length (dense and KV-cache calls) must fail
//! with typed errors. `GPU_ALIBI_EVERY=n` runs every n-th case.
#![cfg(feature = "gpu")]

use flash_codegen::DType;
use flash_runtime::reference::{
    Modifiers, RefGrads, Shape, attention_backward_with, attention_forward_with,
};
use flash_runtime::rng::Rng;
use flash_runtime::{
    Alibi, AttnParams, BwdInputs, BwdOptions, Element, FlashAttention, FlashError, Gradients,
    Tensor4, Tensor4Mut,
};

mod gpu_support;
use gpu_support::{assert_no_failures, check_grad, check_o, every_nth, lse_abs_err, rounded};

type Error = Box<dyn std::error::Error>;
const GUARD: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Case {
    d: usize,
    dtype: DType,
    causal: bool,
    /// `[batch, heads]` slopes (else `[heads]`).
    per_batch: bool,
    /// 0: BLOOM's `2^(-8 (i + 1) / h)`; 1: steep (1.0, 0.5, ...); 2: zero.
    slopes: u8,
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    /// Also run the backward (and, when `det`, its deterministic mode).
    bwd: bool,
    det: bool,
}

impl Case {
    fn slopes(&self) -> Vec<f32> {
        let n = if self.per_batch {
            self.b * self.h
        } else {
            self.h
        };
        (0..n)
            .map(|x| {
                let i = (x % self.h) as f32 + (x / self.h) as f32 * 0.37;
                match self.slopes {
                    0 => (2f32).powf(-8.0 * (i + 1.0) / self.h as f32),
                    1 => (2f32).powf(-i),
                    _ => 0.0,
                }
            })
            .collect()
    }
}

fn grad_tol(dtype: DType) -> f64 {
    [4.5e-4, 3.5e-3][(dtype == DType::Bf16) as usize] * 2.0
}

fn run<T: Element + Into<f64>>(
    rt: &FlashAttention,
    c: &Case,
    seed: u64,
) -> Result<Vec<String>, Error> {
    let s = rt.context().default_stream();
    let mut rng = Rng::new(seed);
    let shape = Shape::new(c.b, c.sq, c.sk, c.h, c.hk, c.d);
    let (qs, ks) = ([c.b, c.sq, c.h, c.d], [c.b, c.sk, c.hk, c.d]);
    let (q, qf) = rounded::<T>(&mut rng, shape.q_len());
    let (k, kf) = rounded::<T>(&mut rng, shape.kv_len());
    let (v, vf) = rounded::<T>(&mut rng, shape.kv_len());
    let slopes = c.slopes();
    let slopes_d = s.clone_htod(&slopes)?;
    let alibi = match c.per_batch {
        true => Alibi::per_batch_head(&slopes_d),
        false => Alibi::per_head(&slopes_d),
    };
    let base = if c.causal {
        AttnParams::causal()
    } else {
        AttnParams::new()
    };
    let p = base.with_alibi(alibi);
    let m = Modifiers::causal(c.causal).with_alibi(slopes.iter().map(|&x| x as f64).collect());
    let mut problems = Vec::new();

    let (qd, kd, vd) = (s.clone_htod(&q)?, s.clone_htod(&k)?, s.clone_htod(&v)?);
    let (no, nl) = (shape.q_len(), c.b * c.h * c.sq);
    let mut o = s.clone_htod(&vec![T::from_f32(f32::NAN); no + GUARD])?;
    let mut lse = s.clone_htod(&vec![f32::NAN; nl + GUARD])?;
    let t = |x, sh| Tensor4::contiguous(x, sh);
    let (qt, kt, vt) = (t(&qd, qs), t(&kd, ks), t(&vd, ks));
    {
        let mut ot = Tensor4Mut::contiguous(&mut o, qs);
        rt.forward_into(&s, &qt, &kt, &vt, &mut ot, Some(lse.slice_mut(..nl)), &p)?;
    }
    let (oh, lh) = (s.clone_dtoh(&o)?, s.clone_dtoh(&lse)?);
    let oh: Vec<f32> = oh.iter().map(|x| x.to_f32()).collect();
    if !oh[no..].iter().chain(&lh[nl..]).all(|x| x.is_nan()) {
        problems.push("a guard band past o or lse was written".into());
    }
    let want = attention_forward_with(&shape, &qf, &kf, &vf, &m, None)?;
    let o64: Vec<f64> = oh[..no].iter().map(|&x| x as f64).collect();
    let o_err = check_o(&o64, &want.o, &want.lse, qs, c.dtype, &mut problems);
    let lse_err = (lh[..nl].iter().zip(&want.lse))
        .map(|(&g, &w)| lse_abs_err(g, w))
        .fold(0.0, f64::max);
    if !(lse_err <= 1e-3) {
        problems.push(format!("lse max abs err {lse_err:.2e}"));
    }
    let mut line = format!("o_rel_l2={o_err:.2e} lse={lse_err:.1e}");

    if c.bwd {
        let (d_o, _) = rounded::<T>(&mut rng, no);
        let dod = s.clone_htod(&d_o)?;
        let dot = t(&dod, qs);
        let (o, lse) = (o.slice(..no), lse.slice(..nl));
        let o_t = Tensor4::contiguous(o, qs);
        let inputs = BwdInputs {
            q: &qt,
            k: &kt,
            v: &vt,
            o: &o_t,
            lse: &lse,
            d_o: &dot,
        };
        let want = attention_backward_with(&shape, &q, &k, &v, &d_o, &m, None)?;
        for det in [false, true].into_iter().filter(|&d| !d || c.det) {
            let opts = if det {
                BwdOptions::deterministic()
            } else {
                BwdOptions::new()
            };
            let g = rt.backward(&s, inputs, &p, &opts)?;
            let again = det
                .then(|| rt.backward(&s, inputs, &p, &opts))
                .transpose()?;
            let mode = if det { "det" } else { "atomic" };
            let (errs, found) = check_grads(rt, c, &g, again.as_ref(), &want)?;
            line += &format!(
                " {mode}: dq={:.2e} dk={:.2e} dv={:.2e}",
                errs[0], errs[1], errs[2]
            );
            problems.extend(found.into_iter().map(|x| format!("{mode}: {x}")));
        }
    }
    println!(
        "{c:?}  {line}  {}",
        if problems.is_empty() { "ok" } else { "FAIL" }
    );
    Ok(problems)
}

/// The gradients' rel-L2 errors against `want` (and what fails); two runs of
/// deterministic mode must agree bit for bit (`again`).
fn check_grads<T: Element>(
    rt: &FlashAttention,
    c: &Case,
    g: &Gradients<T>,
    again: Option<&Gradients<T>>,
    want: &RefGrads,
) -> Result<([f64; 3], Vec<String>), Error> {
    let s = rt.context().default_stream();
    let (mut errs, mut problems) = ([0.0; 3], Vec::new());
    let named = [
        ("dq", &g.dq, &want.dq, again.map(|a| &a.dq)),
        ("dk", &g.dk, &want.dk, again.map(|a| &a.dk)),
        ("dv", &g.dv, &want.dv, again.map(|a| &a.dv)),
    ];
    for (i, (name, got, want, other)) in named.into_iter().enumerate() {
        let host = s.clone_dtoh(got)?;
        let other = other.map(|o| s.clone_dtoh(o)).transpose()?;
        let pair = (host.as_slice(), other.as_deref());
        errs[i] = check_grad(name, pair, want, grad_tol(c.dtype), &mut problems);
    }
    Ok((errs, problems))
}

fn cases() -> Vec<Case> {
    // (causal, per_batch, b, sq, sk, h, hk)
    let shapes: [(bool, bool, usize, usize, usize, usize, usize); 8] = [
        (false, false, 2, 300, 300, 4, 2),
        (true, false, 1, 700, 700, 4, 4),
        (true, true, 2, 200, 333, 2, 1), // sq < sk: the diagonal shifted right
        (true, false, 1, 333, 200, 4, 2), // sq > sk: rows without keys
        (false, true, 3, 129, 1000, 2, 2),
        (false, false, 1, 1, 777, 8, 1), // a decode row on the dense path, MQA
        (true, true, 2, 513, 513, 8, 2),
        (false, false, 1, 1000, 97, 2, 2),
    ];
    let mut v = Vec::new();
    for (i, d) in [64, 128, 40, 96, 256, 32, 160, 192, 224]
        .into_iter()
        .enumerate()
    {
        for (j, &(causal, per_batch, b, sq, sk, h, hk)) in shapes.iter().enumerate() {
            v.push(Case {
                d,
                dtype: [DType::F16, DType::Bf16][(i + j / 2) % 2],
                causal,
                per_batch,
                slopes: [0, 1, 0, 2][(i + j) % 4],
                b,
                sq,
                sk,
                h,
                hk,
                bwd: true,
                det: (i + j) % 2 == 0,
            });
        }
    }
    v
}

/// Every case on `rt`, or with `GPU_ALIBI_EVERY=n` every n-th (a sanitizer's subset).
fn run_all(rt: &FlashAttention, cases: &[Case]) {
    let mut failures = Vec::new();
    for (i, c) in cases
        .iter()
        .enumerate()
        .step_by(every_nth("GPU_ALIBI_EVERY"))
    {
        let seed = 0xa1b1 ^ ((i as u64) << 16);
        let r = match c.dtype {
            DType::F16 => run::<half::f16>(rt, c, seed),
            DType::Bf16 => run::<half::bf16>(rt, c, seed),
        };
        match r {
            Ok(p) if p.is_empty() => {}
            Ok(p) => failures.push(format!("{c:?}: {}", p.join("; "))),
            Err(e) => failures.push(format!("{c:?}: error {e}")),
        }
    }
    assert_no_failures(&failures);
}

#[test]
fn alibi_forward_and_backward_match_f64_reference() {
    let rt = gpu_support::device();
    run_all(&rt, &cases());
}

/// The d256 forwards on a runtime planning for 99 KiB per block: the `_alibi_compact`
/// kernels.
#[test]
fn compact_alibi_forward_matches_f64_reference() {
    let mut rt = gpu_support::device();
    rt.limit_smem(99 * 1024);
    let d256: Vec<Case> = (cases().into_iter())
        .filter(|c| c.d == 256)
        .map(|c| Case { bwd: false, ..c })
        .collect();
    run_all(&rt, &d256);
    let compact = (rt.loaded_specs().iter())
        .filter(|s| s.tiling == flash_codegen::Tiling::Compact && s.name().contains("alibi"))
        .count();
    assert!(compact >= 1, "the compact ALiBi kernels ran");
}

/// 8192 queries in atomic mode: the d128 ALiBi backward's long row, correct.
#[test]
fn long_alibi_backward_matches_f64_reference() {
    let rt = gpu_support::device();
    let c = Case {
        d: 128,
        dtype: DType::Bf16,
        causal: true,
        per_batch: false,
        slopes: 0,
        b: 1,
        sq: 8192,
        sk: 8192,
        h: 2,
        hk: 1,
        bwd: true,
        det: false,
    };
    run_all(&rt, &[c]);
    let long = (rt.loaded_specs().iter()).any(|s| {
        s.tiling == flash_codegen::Tiling::Long && s.scores == flash_codegen::Scores::Alibi
    });
    assert!(long, "the long ALiBi backward ran");
}

/// What has no ALiBi kernel, and slopes of the wrong length or layout, fail typed.
#[test]
fn alibi_errors_are_typed() {
    let rt = gpu_support::device();
    let s = rt.context().default_stream();
    let (b, sq, h, hk, d) = (2, 64, 4, 2, 64);
    let q = s
        .clone_htod(&vec![half::f16::ZERO; b * sq * h * d])
        .unwrap();
    let k = s
        .clone_htod(&vec![half::f16::ZERO; b * sq * hk * d])
        .unwrap();
    let (qs, ks) = ([b, sq, h, d], [b, sq, hk, d]);
    let (qt, kt) = (Tensor4::contiguous(&q, qs), Tensor4::contiguous(&k, ks));
    let heads = s.clone_htod(&[0.5f32; 4]).unwrap();
    let wrong = s.clone_htod(&[0.5f32; 3]).unwrap();
    let per_batch = s.clone_htod(&[0.5f32; 8]).unwrap();
    let fwd = |p: &AttnParams| rt.forward(&s, &qt, &kt, &kt, p).map(|_| ());
    let invalid = |r: flash_runtime::Result<()>, what: &str| match r {
        Err(FlashError::InvalidParam(m)) => println!("{what}: {m}"),
        other => panic!("{what}: want InvalidParam, got {other:?}"),
    };
    let shape = |r: flash_runtime::Result<()>, what: &str| match r {
        Err(FlashError::ShapeMismatch(m)) => println!("{what}: {m}"),
        other => panic!("{what}: want ShapeMismatch, got {other:?}"),
    };
    let a = AttnParams::new().with_alibi(Alibi::per_head(&heads));
    assert!(fwd(&a).is_ok());
    assert!(fwd(&AttnParams::causal().with_alibi(Alibi::per_batch_head(&per_batch))).is_ok());
    invalid(fwd(&a.with_softcap(30.0)), "softcap");
    invalid(fwd(&a.with_window(16, 0)), "window");
    shape(
        fwd(&AttnParams::new().with_alibi(Alibi::per_head(&wrong))),
        "3 slopes, 4 heads",
    );
    shape(
        fwd(&AttnParams::new().with_alibi(Alibi::per_head(&per_batch))),
        "8 as [heads]",
    );
    shape(
        fwd(&AttnParams::new().with_alibi(Alibi::per_batch_head(&heads))),
        "4 as [b, h]",
    );
    // (the KV cache: q [b, 1, h, d] over a cache of capacity sq)
    let q1 = s.clone_htod(&vec![half::f16::ZERO; b * h * d]).unwrap();
    let q1t = Tensor4::contiguous(&q1, [b, 1, h, d]);
    let lens = s.clone_htod(&[sq as i32; 2]).unwrap();
    let opts = flash_runtime::KvOptions::default();
    let kv = |p: &AttnParams| {
        let r = rt.forward_kvcache(&s, &q1t, &kt, &kt, Some(&lens.as_view()), p, &opts);
        r.map(|_| ())
    };
    assert!(kv(&a).is_ok());
    let bad = AttnParams::new().with_alibi(Alibi::per_batch_head(&heads));
    shape(kv(&bad), "KV cache: 4 as [b, h]");
    invalid(kv(&a.with_window(16, 0)), "KV cache under a window");
}
