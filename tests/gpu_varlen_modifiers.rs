//! GPU (feature `gpu`): the varlen (packed sequences) forward under a sliding window
//! and a softcap (`forward_varlen_into` with `AttnParams::with_window` / `with_softcap`:
//! the `fwdvarlen` `_local` and `_softcap` kernels) against the f64 reference
//! (`reference::attention_varlen_with`, the window aligned per sequence at its own
//! `seqlen_k - seqlen_q`). Batches mix empty, length-1, keyless, queryless, odd and
//! long sequences, sq > sk and sq < sk per sequence; windows cross block edges, align
//! with them, are one-sided, leave rows without keys, and are wider than every sequence;
//! caps bite hard (0.7), the tails (5 with scale 1) or barely (50); every kernel head
//! dim, both dtypes, GQA and MQA. Inputs carry NaN guard bands, outputs start
//! NaN-poisoned with a band that must stay untouched. `(-1, 0)` must give the causal
//! varlen kernel's bits. A last case feeds garbage offsets with a window and a cap: it
//! must run without error (under compute-sanitizer memcheck: inside its buffers).
#![cfg(feature = "gpu")]

use flash_codegen::DType;
use flash_runtime::reference::{Modifiers, VarlenShape, attention_varlen_with, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::{AttnParams, Element, FlashAttention, Tensor4, Tensor4Mut, Varlen};

mod gpu_support;
use gpu_support::{cu, lse_abs_err, o_tol, rounded};

const GUARD: usize = 64;

#[derive(Clone, Debug)]
struct Case {
    lens: Vec<(usize, usize)>,
    h: usize,
    hk: usize,
    d: usize,
    dtype: DType,
    window: Option<(i32, i32)>,
    /// The softcap and the softmax scale (None: none, 1 / sqrt(d)).
    softcap: Option<f32>,
    scale: Option<f32>,
}

impl Case {
    fn params(&self) -> (AttnParams<'static>, Modifiers) {
        let mut p = AttnParams::new();
        let mut m = Modifiers::causal(false);
        if let Some((l, r)) = self.window {
            p = p.with_window(l, r);
            m = m.with_window(l as i64, r as i64);
        }
        if let Some(cap) = self.softcap {
            p = p.with_softcap(cap);
            m = m.with_softcap(cap as f64);
        }
        if let Some(s) = self.scale {
            p = p.with_scale(s);
        }
        (p, m)
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// o and lse (as f32) of the varlen forward of `c` under `p` on the packed `q, k, v`,
/// after checking the guard bands.
fn forward<T: Element>(
    rt: &FlashAttention,
    c: &Case,
    (q, k, v): (&[T], &[T], &[T]),
    p: &AttnParams,
) -> Res<(Vec<f32>, Vec<f32>)> {
    let stream = rt.context().default_stream();
    let (cq, ck) = (
        cu(c.lens.iter().map(|l| l.0)),
        cu(c.lens.iter().map(|l| l.1)),
    );
    let (tq, tk) = (*cq.last().unwrap(), *ck.last().unwrap());
    let nan = T::from_f32(f32::NAN);
    let up = |x: &[T]| {
        let mut b = x.to_vec();
        b.extend(std::iter::repeat_n(nan, GUARD));
        stream.clone_htod(&b)
    };
    let (qd, kd, vd) = (up(q)?, up(k)?, up(v)?);
    let qn = tq * c.h * c.d;
    let mut od = stream.clone_htod(&vec![nan; qn + GUARD])?;
    let mut lsed = stream.clone_htod(&vec![f32::NAN; c.h * tq + GUARD])?;
    let i32s = |x: &[usize]| x.iter().map(|&v| v as i32).collect::<Vec<i32>>();
    let (cqd, ckd) = (
        stream.clone_htod(&i32s(&cq))?,
        stream.clone_htod(&i32s(&ck))?,
    );
    let maxq = c.lens.iter().map(|l| l.0).max().unwrap_or(0);
    let maxk = c.lens.iter().map(|l| l.1).max().unwrap_or(0);
    let vl = Varlen::new(cqd.as_view(), ckd.as_view(), maxq, maxk);
    let (qs, ks) = ([1, tq, c.h, c.d], [1, tk, c.hk, c.d]);
    let t = |x, s| Tensor4::contiguous(x, s);
    let (qt, kt, vt) = (t(&qd, qs), t(&kd, ks), t(&vd, ks));
    {
        let mut ot = Tensor4Mut::contiguous(&mut od, qs);
        let l = lsed.slice_mut(0..c.h * tq);
        rt.forward_varlen_into(&stream, (&qt, &kt, &vt), (&mut ot, Some(l)), &vl, p)?;
    }
    let (o, lse) = (stream.clone_dtoh(&od)?, stream.clone_dtoh(&lsed)?);
    let o: Vec<f32> = o.iter().map(|x| x.to_f32()).collect();
    if !o[qn..].iter().chain(&lse[c.h * tq..]).all(|x| x.is_nan()) {
        return Err("a guard band past o or lse was written".into());
    }
    Ok((o[..qn].to_vec(), lse[..c.h * tq].to_vec()))
}

fn check<T: Element + Into<f64>>(rt: &FlashAttention, c: &Case, seed: u64) -> Res<Vec<String>> {
    let mut rng = Rng::new(seed);
    let s = VarlenShape {
        cu_seqlens_q: cu(c.lens.iter().map(|l| l.0)),
        cu_seqlens_k: cu(c.lens.iter().map(|l| l.1)),
        heads: c.h,
        heads_k: c.hk,
        head_dim: c.d,
    };
    let (qn, kn) = (s.total_q() * c.h * c.d, s.total_k() * c.hk * c.d);
    let (q, _) = rounded::<T>(&mut rng, qn);
    let (k, _) = rounded::<T>(&mut rng, kn);
    let (v, _) = rounded::<T>(&mut rng, kn);
    let (p, m) = c.params();
    let (o, lse) = forward(rt, c, (&q, &k, &v), &p)?;
    let want = attention_varlen_with(&s, (&q, &k, &v), &m, c.scale.map(f64::from))?;
    let mut problems = Vec::new();
    // rows the reference masks whole (lse -inf) are exactly 0
    let masked_nonzero = (0..o.len())
        .filter(|&i| {
            let (row, head) = (i / (c.h * c.d), i / c.d % c.h);
            want.lse[head * s.total_q() + row] == f64::NEG_INFINITY && o[i] != 0.0
        })
        .count();
    if masked_nonzero > 0 {
        problems.push(format!("{masked_nonzero} elements of masked rows not 0"));
    }
    let o64: Vec<f64> = o.iter().map(|&x| x as f64).collect();
    let o_err = rel_l2(&o64, &want.o);
    if !(o_err <= o_tol(c.dtype)) {
        problems.push(format!("o rel-L2 {o_err:.3e}"));
    }
    let lse_err = (lse.iter().zip(&want.lse))
        .map(|(&g, &w)| lse_abs_err(g, w))
        .fold(0.0, f64::max);
    if !(lse_err <= 1e-3) {
        problems.push(format!("lse max abs err {lse_err:.2e}"));
    }
    // (-1, 0) is the causal kernel, bit for bit
    if c.window == Some((-1, 0)) {
        let causal = p.with_mask(flash_runtime::Mask::Causal);
        let (oc, lc) = forward(rt, c, (&q, &k, &v), &causal)?;
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        if bits(&oc) != bits(&o) || bits(&lc) != bits(&lse) {
            problems.push("window (-1, 0) differs from the causal kernel".into());
        }
    }
    println!(
        "{c:?}  o_rel_l2={o_err:.2e} (tol {:.0e}) lse={lse_err:.1e}  {}",
        o_tol(c.dtype),
        if problems.is_empty() { "ok" } else { "FAIL" }
    );
    Ok(problems)
}

fn cases() -> Vec<Case> {
    let mixed = vec![
        (0, 0),
        (1, 1),
        (77, 300),
        (3, 0),
        (513, 513),
        (1, 40),
        (200, 129),
        (0, 5),
        (700, 650),
    ];
    let long = vec![(1100, 1100), (15, 15), (64, 64), (333, 500), (1, 1)];
    // windows crossing and aligned with block edges, one-sided, wider than any sequence,
    // a diagonal band leaving rows of sq > sk sequences without keys
    let windows = [
        Some((100, 0)),
        Some((127, 0)),
        Some((64, 64)),
        Some((0, 0)),
        Some((-1, 3)),
        Some((5, -1)),
        Some((4096, 4096)),
        Some((-1, 0)),
        Some((126, 1)),
        None,
    ];
    let caps = [
        None,
        Some((0.7, None)),
        Some((5.0, Some(1.0))),
        Some((50.0, None)),
    ];
    let mut v = Vec::new();
    for (i, d) in [64, 128, 40, 96, 256, 32, 160, 192, 224]
        .into_iter()
        .enumerate()
    {
        for (j, &window) in windows.iter().enumerate() {
            let cap = caps[(i + j) % caps.len()];
            if window.is_none() && cap.is_none() {
                continue; // (gpu_varlen's)
            }
            let (h, hk) = [(8, 2), (4, 4), (6, 1)][(i + j) % 3];
            v.push(Case {
                lens: [&mixed, &long][(i + j) % 2].clone(),
                h,
                hk,
                d,
                dtype: [DType::F16, DType::Bf16][(i + j / 2) % 2],
                window,
                softcap: cap.map(|c| c.0),
                scale: cap.and_then(|c| c.1),
            });
        }
    }
    v
}

#[test]
fn varlen_window_and_softcap_match_f64_reference() {
    let rt = gpu_support::device();
    let every: usize = std::env::var("GPU_WINDOW_EVERY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut failures = Vec::new();
    for (i, c) in cases().iter().enumerate().step_by(every) {
        let seed = 0x1ca1 ^ ((i as u64) << 16);
        let r = match c.dtype {
            DType::F16 => check::<half::f16>(&rt, c, seed),
            DType::Bf16 => check::<half::bf16>(&rt, c, seed),
        };
        match r {
            Ok(p) if p.is_empty() => {}
            Ok(p) => failures.push(format!("{c:?}: {}", p.join("; "))),
            Err(e) => failures.push(format!("{c:?}: error {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Garbage offsets (negative, decreasing, past the buffers) under a window and a cap:
/// the kernel clamps them; the call succeeds and (under memcheck) touches nothing outside
/// buffers of exactly the packed size.
#[test]
fn garbage_offsets_with_a_window_stay_in_bounds() {
    let rt = gpu_support::device();
    let stream = rt.context().default_stream();
    let (tq, tk, h, hk, d) = (100, 80, 4, 2, 128);
    let cuq = [0i32, 60, -7, i32::MAX, 30, i32::MIN];
    let cuk = [5i32, -1, 1 << 30, 40, 2, 79];
    let x = vec![half::bf16::from_f32(0.25); tq * h * d];
    let y = vec![half::bf16::from_f32(0.5); tk * hk * d];
    let (q, k, v) = (
        stream.clone_htod(&x).unwrap(),
        stream.clone_htod(&y).unwrap(),
        stream.clone_htod(&y).unwrap(),
    );
    let (cuq, cuk) = (
        stream.clone_htod(&cuq).unwrap(),
        stream.clone_htod(&cuk).unwrap(),
    );
    let vl = Varlen::new(cuq.as_view(), cuk.as_view(), 4096, 4096);
    let (qs, ks) = ([1, tq, h, d], [1, tk, hk, d]);
    let t = |b, s| Tensor4::contiguous(b, s);
    for p in [
        AttnParams::new().with_window(16, 3),
        AttnParams::new().with_window(0, -1).with_softcap(1.5),
        AttnParams::causal().with_softcap(30.0),
    ] {
        let f = rt
            .forward_varlen(&stream, (&t(&q, qs), &t(&k, ks), &t(&v, ks)), &vl, &p)
            .unwrap();
        stream.synchronize().unwrap();
        drop(f);
    }
}
