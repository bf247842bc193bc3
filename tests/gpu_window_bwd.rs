//! GPU (feature `gpu`): the backward under a sliding window and a softcap (`backward` /
//! `backward_varlen` with `AttnParams::with_window` / `with_softcap`: bwd and bwddq on
//! their `_local` / `_softcap` kernels, bwdpre and bwdpost plain) against the f64
//! reference (`reference::attention_backward_with`, `attention_varlen_backward_with`: the
//! softcap's dS times `1 - tanh^2`), on our own forward's o and lse. Windows that cross
//! block edges and align with them, one-sided (left only: local causal; right only),
//! wider than the sequence, `(0, 0)`, windows leaving rows without keys (sq > sk) and keys
//! without queries (sq < sk: key blocks before every query's window); caps that bite
//! (0.7; 5 on scores of unit scale) and one that barely does (30), unmasked, causal and
//! windowed; sq != sk both ways, GQA and MQA, both dtypes, every kernel head dim and 40
//! (columns past d); 8192 queries in atomic mode: the d128 long row windowed (a 4096-key
//! reach) and capped, the standard row under a 512-key window;
//! the varlen backward over batches mixing empty, keyless, queryless and odd sequences,
//! on the GPU's rows (cc 9.0: the wide ones) and an A100's. Atomic mode on every case,
//! deterministic mode on every other one (and two runs bitwise equal). Gradients of rows
//! and keys the window leaves without a partner must be exactly 0. `GPU_WINDOW_EVERY=n`
//! runs every n-th case, `GPU_SOFTCAP_ONLY=1` the softcap ones.
#![cfg(feature = "gpu")]

use flash_codegen::DType;
use flash_runtime::reference::{
    Modifiers, RefGrads, Shape, VarlenShape, attention_backward_with,
    attention_varlen_backward_with, rel_l2,
};
use flash_runtime::rng::Rng;
use flash_runtime::{
    AttnParams, BwdInputs, BwdOptions, Element, FlashAttention, Gradients, Tensor4, Varlen,
};

#[path = "window_bwd/cases.rs"]
mod cases;
mod gpu_support;
use cases::{dense_cases, varlen_cases};
use gpu_support::{cu, rounded, varlen_runtimes};

type Error = Box<dyn std::error::Error>;

#[derive(Clone, Debug)]
struct Case {
    d: usize,
    dtype: DType,
    window: (i32, i32),
    /// Dense: `[(sq, sk)]` with `b` sequences of it; varlen: one entry per sequence.
    lens: Vec<(usize, usize)>,
    b: usize,
    h: usize,
    hk: usize,
    varlen: bool,
    det: bool,
    /// A softcap and the softmax scale it runs with (None: 1 / sqrt(d)).
    softcap: Option<(f32, Option<f32>)>,
}

fn tol(dtype: DType) -> f64 {
    [4.5e-4, 3.5e-3][(dtype == DType::Bf16) as usize] * 2.0
}

/// The query rows and key rows the window leaves without a partner (their gradients
/// are exactly 0), over the packed rows of every sequence in order. (Only these: a query
/// that sees a single key has dS = P (dP - D) = 0 in exact arithmetic, but not in ours.)
fn partnerless(c: &Case) -> (Vec<bool>, Vec<bool>) {
    let (l, r) = c.window;
    let seqs: Vec<(usize, usize)> = match c.varlen {
        true => c.lens.clone(),
        false => vec![c.lens[0]; c.b],
    };
    let (mut qz, mut kz) = (Vec::new(), Vec::new());
    for (sq, sk) in seqs {
        let shift = sk as i64 - sq as i64;
        // query i sees keys lo..=hi of its diagonal d = i + shift
        let lo = |d: i64| if l < 0 { 0 } else { d - l as i64 };
        let hi = |d: i64| if r < 0 { sk as i64 - 1 } else { d + r as i64 };
        qz.extend((0..sq as i64).map(|i| {
            let (a, b) = (lo(i + shift).max(0), hi(i + shift).min(sk as i64 - 1));
            a > b
        }));
        kz.extend((0..sk as i64).map(|j| {
            // the queries i with lo(i + shift) <= j <= hi(i + shift)
            let a = if r < 0 { 0 } else { j - shift - r as i64 };
            let b = if l < 0 {
                sq as i64 - 1
            } else {
                j - shift + l as i64
            };
            a.max(0) > b.min(sq as i64 - 1)
        }));
    }
    (qz, kz)
}

/// Checks the gradients `g` against the reference `want` (rows without a partner exactly
/// 0); two runs of deterministic mode must agree bit for bit (`again`).
fn check_grads<T: Element>(
    rt: &FlashAttention,
    c: &Case,
    g: &Gradients<T>,
    again: Option<&Gradients<T>>,
    want: &RefGrads,
) -> Result<Vec<String>, Error> {
    let stream = rt.context().default_stream();
    let mut problems = Vec::new();
    let (qz, kz) = partnerless(c);
    for (name, got, want, other, zero, row) in [
        ("dq", &g.dq, &want.dq, again.map(|a| &a.dq), &qz, c.h * c.d),
        ("dk", &g.dk, &want.dk, again.map(|a| &a.dk), &kz, c.hk * c.d),
        ("dv", &g.dv, &want.dv, again.map(|a| &a.dv), &kz, c.hk * c.d),
    ] {
        let host = stream.clone_dtoh(got)?;
        let bits = |x: &[T]| x.iter().map(|v| v.to_f32().to_bits()).collect::<Vec<u32>>();
        let h: Vec<f64> = host.iter().map(|x| x.to_f32() as f64).collect();
        let zeros_off = (h.iter().enumerate())
            .filter(|&(i, g)| zero[i / row] && *g != 0.0)
            .count();
        if zeros_off > 0 {
            problems.push(format!(
                "{name}: {zeros_off} elements of partnerless rows not 0"
            ));
        }
        let e = rel_l2(&h, want);
        if want.iter().any(|&x| x != 0.0) && !(e <= tol(c.dtype)) {
            problems.push(format!("{name} rel-L2 {e:.3e}"));
        }
        if let Some(o) = other {
            if bits(&stream.clone_dtoh(o)?) != bits(&host) {
                problems.push(format!(
                    "{name}: deterministic mode not bitwise reproducible"
                ));
            }
        }
    }
    Ok(problems)
}

fn run<T: Element + Into<f64>>(
    rt: &FlashAttention,
    c: &Case,
    seed: u64,
) -> Result<Vec<String>, Error> {
    let stream = rt.context().default_stream();
    let mut rng = Rng::new(seed);
    let (l, r) = c.window;
    let mut p = AttnParams::new().with_window(l, r);
    let mut m = Modifiers::causal(false).with_window(l as i64, r as i64);
    let scale = c.softcap.and_then(|x| x.1);
    if let Some((cap, _)) = c.softcap {
        p = p.with_softcap(cap);
        m = m.with_softcap(cap as f64);
    }
    if let Some(s) = scale {
        p = p.with_scale(s);
    }
    let scale = scale.map(f64::from);
    let (tq, tk) = match c.varlen {
        true => (
            c.lens.iter().map(|x| x.0).sum::<usize>(),
            c.lens.iter().map(|x| x.1).sum::<usize>(),
        ),
        false => (c.b * c.lens[0].0, c.b * c.lens[0].1),
    };
    let (qn, kn) = (tq * c.h * c.d, tk * c.hk * c.d);
    let (q, _) = rounded::<T>(&mut rng, qn);
    let (k, _) = rounded::<T>(&mut rng, kn);
    let (v, _) = rounded::<T>(&mut rng, kn);
    let (d_o, _) = rounded::<T>(&mut rng, qn);
    let up = |x: &[T]| stream.clone_htod(x);
    let (qd, kd, vd, dod) = (up(&q)?, up(&k)?, up(&v)?, up(&d_o)?);
    let opts = |det: bool| match det {
        true => BwdOptions::deterministic(),
        false => BwdOptions::new(),
    };
    let mut problems = Vec::new();
    if c.varlen {
        let (cq, ck) = (
            cu(c.lens.iter().map(|x| x.0)),
            cu(c.lens.iter().map(|x| x.1)),
        );
        let i32s = |x: &[usize]| x.iter().map(|&v| v as i32).collect::<Vec<i32>>();
        let (cqd, ckd) = (
            stream.clone_htod(&i32s(&cq))?,
            stream.clone_htod(&i32s(&ck))?,
        );
        let maxq = c.lens.iter().map(|x| x.0).max().unwrap_or(0);
        let maxk = c.lens.iter().map(|x| x.1).max().unwrap_or(0);
        let vl = Varlen::new(cqd.as_view(), ckd.as_view(), maxq, maxk);
        let (qs, ks) = ([1, tq, c.h, c.d], [1, tk, c.hk, c.d]);
        let t = |x, s| Tensor4::contiguous(x, s);
        let (qt, kt, vt, dot) = (t(&qd, qs), t(&kd, ks), t(&vd, ks), t(&dod, qs));
        let f = rt.forward_varlen(&stream, (&qt, &kt, &vt), &vl, &p)?;
        let (o, lse) = (f.o(), f.lse());
        let inputs = BwdInputs {
            q: &qt,
            k: &kt,
            v: &vt,
            o: &o,
            lse: &lse,
            d_o: &dot,
        };
        let s = VarlenShape {
            cu_seqlens_q: cq,
            cu_seqlens_k: ck,
            heads: c.h,
            heads_k: c.hk,
            head_dim: c.d,
        };
        let want = attention_varlen_backward_with(&s, (&q, &k, &v), &d_o, &m, scale)?;
        for det in [false, true].into_iter().filter(|&d| !d || c.det) {
            let g = rt.backward_varlen(&stream, inputs, &vl, &p, &opts(det))?;
            let again = match det {
                true => Some(rt.backward_varlen(&stream, inputs, &vl, &p, &opts(det))?),
                false => None,
            };
            let mode = if det { "det" } else { "atomic" };
            let found = check_grads(rt, c, &g, again.as_ref(), &want)?;
            problems.extend(found.into_iter().map(|x| format!("{mode}: {x}")));
        }
    } else {
        let (sq, sk) = c.lens[0];
        let shape = Shape::new(c.b, sq, sk, c.h, c.hk, c.d);
        let (qs, ks) = ([c.b, sq, c.h, c.d], [c.b, sk, c.hk, c.d]);
        let t = |x, s| Tensor4::contiguous(x, s);
        let (qt, kt, vt, dot) = (t(&qd, qs), t(&kd, ks), t(&vd, ks), t(&dod, qs));
        let f = rt.forward(&stream, &qt, &kt, &vt, &p)?;
        let (o, lse) = (f.o(), f.lse());
        let inputs = BwdInputs {
            q: &qt,
            k: &kt,
            v: &vt,
            o: &o,
            lse: &lse,
            d_o: &dot,
        };
        let want = attention_backward_with(&shape, &q, &k, &v, &d_o, &m, scale)?;
        for det in [false, true].into_iter().filter(|&d| !d || c.det) {
            let g = rt.backward(&stream, inputs, &p, &opts(det))?;
            let again = match det {
                true => Some(rt.backward(&stream, inputs, &p, &opts(det))?),
                false => None,
            };
            let mode = if det { "det" } else { "atomic" };
            let found = check_grads(rt, c, &g, again.as_ref(), &want)?;
            problems.extend(found.into_iter().map(|x| format!("{mode}: {x}")));
        }
    }
    Ok(problems)
}

/// Runs `cases` (every `GPU_WINDOW_EVERY`-th one, default all) on each runtime.
fn run_all(cases: &[Case], rts: &[(&str, FlashAttention)]) {
    let only_softcap = std::env::var("GPU_SOFTCAP_ONLY").is_ok();
    let every: usize = std::env::var("GPU_WINDOW_EVERY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate().step_by(every.max(1)) {
        if only_softcap && c.softcap.is_none() {
            continue;
        }
        for (what, rt) in rts {
            let seed = 0xb3d ^ ((i as u64) << 16);
            let r = match c.dtype {
                DType::F16 => run::<half::f16>(rt, c, seed),
                DType::Bf16 => run::<half::bf16>(rt, c, seed),
            };
            let line = match &r {
                Ok(p) if p.is_empty() => "ok".to_string(),
                Ok(p) => p.join("; "),
                Err(e) => format!("error {e}"),
            };
            println!("{what} {c:?}  {line}");
            if line != "ok" {
                failures.push(format!("{what} {c:?}: {line}"));
            }
        }
    }
    for (_, rt) in rts {
        gpu_support::print_tilings(rt);
    }
    assert!(
        failures.is_empty(),
        "{} failing:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn windowed_backward_matches_f64_reference() {
    let rt = gpu_support::device();
    run_all(&dense_cases(), &[("gpu", rt)]);
}

#[test]
fn windowed_varlen_backward_matches_f64_reference() {
    run_all(&varlen_cases(), &varlen_runtimes());
}
