//! GPU (feature `gpu`): ALiBi in the varlen calls (`forward_varlen_into`, `backward_varlen`
//! with `AttnParams::with_alibi`: the `_alibi` fwdvarlen, bwdvarlen and bwddqvarlen
//! kernels) against the f64 reference (`reference::attention_varlen_with` /
//! `attention_varlen_backward_with`, each sequence's slopes its own row of `[batch,
//! heads]`): packed batches mixing empty, keyless, queryless, odd and long sequences, sq >
//! sk and sq < sk within one batch, slopes `[heads]` and `[batch, heads]`, no mask and
//! causal, GQA, both dtypes, head dims 32 to 256 and 40; o and lse NaN-poisoned with NaN
//! guard bands; the backward in both modes (deterministic mode twice, bitwise equal) on the
//! GPU's own rows (cc 9.0: the wide ones) and as an A100.
#![cfg(feature = "gpu")]

use flash_codegen::DType;
use flash_runtime::reference::{
    Modifiers, VarlenShape, attention_varlen_backward_with, attention_varlen_with, rel_l2,
};
use flash_runtime::rng::Rng;
use flash_runtime::{
    Alibi, AttnParams, BwdInputs, BwdOptions, Element, FlashAttention, Tensor4, Tensor4Mut, Varlen,
};

mod gpu_support;
use gpu_support::{
    assert_no_failures, check_grad, cu, every_nth, lse_abs_err, o_tol, rounded, varlen_runtimes,
};

type Error = Box<dyn std::error::Error>;
const GUARD: usize = 4096;

#[derive(Clone, Debug)]
struct Case {
    d: usize,
    dtype: DType,
    causal: bool,
    per_batch: bool,
    /// (seqlen_q, seqlen_k) per sequence.
    lens: Vec<(usize, usize)>,
    h: usize,
    hk: usize,
    det: bool,
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
    let (cq, ck) = (
        cu(c.lens.iter().map(|x| x.0)),
        cu(c.lens.iter().map(|x| x.1)),
    );
    let (tq, tk, nb) = (cq[c.lens.len()], ck[c.lens.len()], c.lens.len());
    let (qs, ks) = ([1, tq, c.h, c.d], [1, tk, c.hk, c.d]);
    let (q, _) = rounded::<T>(&mut rng, tq * c.h * c.d);
    let (k, _) = rounded::<T>(&mut rng, tk * c.hk * c.d);
    let (v, _) = rounded::<T>(&mut rng, tk * c.hk * c.d);
    let (d_o, _) = rounded::<T>(&mut rng, tq * c.h * c.d);
    let n = if c.per_batch { nb * c.h } else { c.h };
    let slopes: Vec<f32> = (0..n).map(|i| 0.9f32.powi(i as i32) * 0.5).collect();
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
    let shape = VarlenShape {
        cu_seqlens_q: cq.clone(),
        cu_seqlens_k: ck.clone(),
        heads: c.h,
        heads_k: c.hk,
        head_dim: c.d,
    };
    let i32s = |x: &[usize]| x.iter().map(|&v| v as i32).collect::<Vec<i32>>();
    let (cqd, ckd) = (s.clone_htod(&i32s(&cq))?, s.clone_htod(&i32s(&ck))?);
    let maxq = c.lens.iter().map(|x| x.0).max().unwrap_or(0);
    let maxk = c.lens.iter().map(|x| x.1).max().unwrap_or(0);
    let vl = Varlen::new(cqd.as_view(), ckd.as_view(), maxq, maxk);
    let (qd, kd, vd, dod) = (
        s.clone_htod(&q)?,
        s.clone_htod(&k)?,
        s.clone_htod(&v)?,
        s.clone_htod(&d_o)?,
    );
    let t = |x, sh| Tensor4::contiguous(x, sh);
    let (qt, kt, vt, dot) = (t(&qd, qs), t(&kd, ks), t(&vd, ks), t(&dod, qs));
    let (no, nl) = (tq * c.h * c.d, c.h * tq);
    let mut o = s.clone_htod(&vec![T::from_f32(f32::NAN); no + GUARD])?;
    let mut lse = s.clone_htod(&vec![f32::NAN; nl + GUARD])?;
    {
        let mut ot = Tensor4Mut::contiguous(&mut o, qs);
        let l = Some(lse.slice_mut(..nl));
        rt.forward_varlen_into(&s, (&qt, &kt, &vt), (&mut ot, l), &vl, &p)?;
    }
    let mut problems = Vec::new();
    let (oh, lh) = (s.clone_dtoh(&o)?, s.clone_dtoh(&lse)?);
    let oh: Vec<f64> = oh.iter().map(|x| x.to_f32() as f64).collect();
    if !oh[no..].iter().all(|x| x.is_nan()) || !lh[nl..].iter().all(|x| x.is_nan()) {
        problems.push("a guard band past o or lse was written".into());
    }
    let want = attention_varlen_with(&shape, (&q, &k, &v), &m, None)?;
    let o_err = rel_l2(&oh[..no], &want.o);
    if !(o_err <= o_tol(c.dtype)) {
        problems.push(format!("o rel-L2 {o_err:.3e}"));
    }
    let lse_err = (lh[..nl].iter().zip(&want.lse))
        .map(|(&g, &w)| lse_abs_err(g, w))
        .fold(0.0, f64::max);
    if !(lse_err <= 1e-3) {
        problems.push(format!("lse max abs err {lse_err:.2e}"));
    }
    let mut line = format!("o={o_err:.2e} lse={lse_err:.1e}");
    let (o_v, lse_v) = (o.slice(..no), lse.slice(..nl));
    let o_t = Tensor4::contiguous(o_v, qs);
    let inputs = BwdInputs {
        q: &qt,
        k: &kt,
        v: &vt,
        o: &o_t,
        lse: &lse_v,
        d_o: &dot,
    };
    let want = attention_varlen_backward_with(&shape, (&q, &k, &v), &d_o, &m, None)?;
    for det in [false, true].into_iter().filter(|&d| !d || c.det) {
        let opts = if det {
            BwdOptions::deterministic()
        } else {
            BwdOptions::new()
        };
        let g = rt.backward_varlen(&s, inputs, &vl, &p, &opts)?;
        let again = det
            .then(|| rt.backward_varlen(&s, inputs, &vl, &p, &opts))
            .transpose()?;
        let mode = if det { "det" } else { "atomic" };
        let named = [
            ("dq", &g.dq, &want.dq, again.as_ref().map(|a| &a.dq)),
            ("dk", &g.dk, &want.dk, again.as_ref().map(|a| &a.dk)),
            ("dv", &g.dv, &want.dv, again.as_ref().map(|a| &a.dv)),
        ];
        for (name, got, want, other) in named {
            let host = s.clone_dtoh(got)?;
            let other = other.map(|o| s.clone_dtoh(o)).transpose()?;
            let pair = (host.as_slice(), other.as_deref());
            let e = check_grad(name, pair, want, grad_tol(c.dtype), &mut problems);
            line += &format!(" {mode} {name}={e:.2e}");
        }
    }
    println!(
        "{c:?}  {line}  {}",
        if problems.is_empty() { "ok" } else { "FAIL" }
    );
    Ok(problems)
}

fn cases() -> Vec<Case> {
    // each batch mixes shapes: empty, keyless, queryless, sq > sk, sq < sk, odd, long
    let batches: [&[(usize, usize)]; 4] = [
        &[(300, 300), (0, 0), (17, 400), (250, 90), (0, 33), (5, 0)],
        &[(1, 513), (700, 700), (129, 1)],
        &[(64, 64), (65, 63), (128, 256), (333, 200)],
        &[(1000, 97), (3, 3)],
    ];
    let mut v = Vec::new();
    for (i, d) in [64, 128, 40, 96, 256, 32, 160, 192, 224]
        .into_iter()
        .enumerate()
    {
        for (j, lens) in batches.iter().enumerate() {
            let (h, hk) = [(4, 2), (2, 2), (8, 1), (4, 4)][(i + j) % 4];
            v.push(Case {
                d,
                dtype: [DType::F16, DType::Bf16][(i + j / 2) % 2],
                causal: (i + j) % 2 == 0,
                per_batch: (i + j) % 3 != 0,
                lens: lens.to_vec(),
                h,
                hk,
                det: (i + j) % 2 == 1,
            });
        }
    }
    v
}

#[test]
fn alibi_varlen_forward_and_backward_match_f64_reference() {
    let mut failures = Vec::new();
    for (what, rt) in varlen_runtimes() {
        let every = every_nth("GPU_ALIBI_EVERY");
        for (i, c) in cases().iter().enumerate().step_by(every) {
            let seed = 0xa1b2 ^ ((i as u64) << 16);
            let r = match c.dtype {
                DType::F16 => run::<half::f16>(&rt, c, seed),
                DType::Bf16 => run::<half::bf16>(&rt, c, seed),
            };
            match r {
                Ok(p) if p.is_empty() => {}
                Ok(p) => failures.push(format!("{what} {c:?}: {}", p.join("; "))),
                Err(e) => failures.push(format!("{what} {c:?}: error {e}")),
            }
        }
    }
    assert_no_failures(&failures);
}
