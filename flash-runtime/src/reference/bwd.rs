//! CPU float64 reference of the backward pass, same semantics as the forward reference:
//! with `P = softmax(scale * Q K^T [+ mask])`, `O = P V` and an upstream gradient dO,
//! `dV = P^T dO`, `dP = dO V^T`, `D = rowsum(dO * O)`, `dS = P * (dP - D)`,
//! `dQ = scale * dS K`, `dK = scale * dS^T Q`. dK and dV of a kv head are summed over its
//! `heads / heads_k` query heads; a fully masked row contributes nothing (its dq is 0).

use super::{Modifiers, ROWS_PER_TASK, Shape, attention_forward_with, dot, par_map};
use crate::error::{FlashError, Result};

/// Reference gradients, contiguous: dq `[b, sq, h, d]`, dk and dv `[b, sk, hk, d]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RefGrads {
    /// Gradient w.r.t. q.
    pub dq: Vec<f64>,
    /// Gradient w.r.t. k.
    pub dk: Vec<f64>,
    /// Gradient w.r.t. v.
    pub dv: Vec<f64>,
}

fn to_f64<T: Copy + Into<f64>>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&v| v.into()).collect()
}

fn axpy(y: &mut [f64], a: f64, x: &[f64]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += a * x);
}

/// Gradients of `sum(O * dO)` w.r.t. q, k, v on contiguous host tensors (q and dO
/// `[b, sq, h, d]`, k and v `[b, sk, hk, d]`); O and the lse come from the f64 forward
/// reference of the same inputs. `softmax_scale` defaults to `1 / sqrt(head_dim)`.
pub fn attention_backward<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k: &[T],
    v: &[T],
    d_o: &[T],
    causal: bool,
    softmax_scale: Option<f64>,
) -> Result<RefGrads> {
    attention_backward_with(
        shape,
        q,
        k,
        v,
        d_o,
        &Modifiers::causal(causal),
        softmax_scale,
    )
}

/// [`attention_backward`] with the score rule `mods`: `dX = dS * ds/dx` (softcap's
/// `1 - tanh^2`) takes dS's place in dQ and dK.
pub fn attention_backward_with<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k: &[T],
    v: &[T],
    d_o: &[T],
    mods: &Modifiers,
    softmax_scale: Option<f64>,
) -> Result<RefGrads> {
    if d_o.len() != shape.q_len() {
        return Err(FlashError::ShapeMismatch(format!(
            "reference: {shape:?} needs dO of {} elements, got {}",
            shape.q_len(),
            d_o.len()
        )));
    }
    let fwd = attention_forward_with(shape, q, k, v, mods, softmax_scale)?;
    let Shape {
        batch: b,
        seqlen_q: sq,
        seqlen_k: sk,
        heads: h,
        heads_k: hk,
        head_dim: d,
    } = *shape;
    let scale = softmax_scale.unwrap_or(1.0 / (d as f64).sqrt());
    let mut g = RefGrads {
        dq: vec![0.0; shape.q_len()],
        dk: vec![0.0; shape.kv_len()],
        dv: vec![0.0; shape.kv_len()],
    };
    if shape.q_len() == 0 || shape.kv_len() == 0 {
        return Ok(g);
    }
    let (q, k, v, d_o) = (to_f64(q), to_f64(k), to_f64(v), to_f64(d_o));
    let row =
        |s: usize, heads: usize, bi: usize, i: usize, hi: usize| ((bi * s + i) * heads + hi) * d;
    let dvec: Vec<f64> = (0..b * h * sq)
        .map(|t| {
            let (bi, hi, i) = (t / (h * sq), (t / sq) % h, t % sq);
            let r = row(sq, h, bi, i, hi);
            dot(&d_o[r..r + d], &fwd.o[r..r + d])
        })
        .collect();
    // dX[i][j] = dS * ds/dx (with P) of query row i of head hi and key j of its kv head,
    // or None when i does not see j.
    let ds = |bi: usize, hi: usize, i: usize, j: usize| -> Option<(f64, f64)> {
        if !mods.visible(i, j, sq, sk) {
            return None;
        }
        let lrow = (bi * h + hi) * sq + i;
        let (qr, kr) = (row(sq, h, bi, i, hi), row(sk, hk, bi, j, hi / (h / hk)));
        let x = dot(&q[qr..qr + d], &k[kr..kr + d]) * scale;
        let s = mods.score(x, (i, j), (bi, hi, h), (sq, sk));
        let p = (s - fwd.lse[lrow]).exp();
        let dp = dot(&d_o[qr..qr + d], &v[kr..kr + d]);
        Some((p, p * (dp - dvec[lrow]) * mods.dscore(x)))
    };

    // dq: one task per (batch, head, block of rows).
    let chunks = sq.div_ceil(ROWS_PER_TASK);
    let dq_rows = par_map(b * h * chunks, |t| {
        let (bi, hi, c) = (t / (h * chunks), (t / chunks) % h, t % chunks);
        let rows = c * ROWS_PER_TASK..((c + 1) * ROWS_PER_TASK).min(sq);
        let mut out = vec![0.0; rows.len() * d];
        for (i, acc) in rows.zip(out.chunks_mut(d)) {
            for j in 0..sk {
                if let Some((_, ds)) = ds(bi, hi, i, j) {
                    let kr = row(sk, hk, bi, j, hi / (h / hk));
                    axpy(acc, ds * scale, &k[kr..kr + d]);
                }
            }
        }
        out
    })?;
    for (t, rows) in dq_rows.iter().enumerate() {
        let (bi, hi, c) = (t / (h * chunks), (t / chunks) % h, t % chunks);
        for (r, x) in rows.chunks(d).enumerate() {
            let dst = row(sq, h, bi, c * ROWS_PER_TASK + r, hi);
            g.dq[dst..dst + d].copy_from_slice(x);
        }
    }

    // dk, dv: one task per (batch, kv head, block of keys), summing over the group's heads.
    let group = h / hk;
    let kchunks = sk.div_ceil(ROWS_PER_TASK);
    let kv_rows = par_map(b * hk * kchunks, |t| {
        let (bi, khi, c) = (t / (hk * kchunks), (t / kchunks) % hk, t % kchunks);
        let keys = c * ROWS_PER_TASK..((c + 1) * ROWS_PER_TASK).min(sk);
        let mut dk = vec![0.0; keys.len() * d];
        let mut dv = vec![0.0; keys.len() * d];
        for ((j, dk), dv) in keys.zip(dk.chunks_mut(d)).zip(dv.chunks_mut(d)) {
            for hi in khi * group..(khi + 1) * group {
                for i in 0..sq {
                    if let Some((p, ds)) = ds(bi, hi, i, j) {
                        let qr = row(sq, h, bi, i, hi);
                        axpy(dv, p, &d_o[qr..qr + d]);
                        axpy(dk, ds * scale, &q[qr..qr + d]);
                    }
                }
            }
        }
        (dk, dv)
    })?;
    for (t, (dk, dv)) in kv_rows.iter().enumerate() {
        let (bi, khi, c) = (t / (hk * kchunks), (t / kchunks) % hk, t % kchunks);
        for (r, (x, y)) in dk.chunks(d).zip(dv.chunks(d)).enumerate() {
            let dst = row(sk, hk, bi, c * ROWS_PER_TASK + r, khi);
            g.dk[dst..dst + d].copy_from_slice(x);
            g.dv[dst..dst + d].copy_from_slice(y);
        }
    }
    Ok(g)
}

/// [`attention_backward`] for tests that know their shapes.
///
/// # Panics
/// If the slice lengths do not match `shape` or `heads % heads_k != 0`.
pub fn backward<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k: &[T],
    v: &[T],
    d_o: &[T],
    causal: bool,
    softmax_scale: Option<f64>,
) -> RefGrads {
    attention_backward(shape, q, k, v, d_o, causal, softmax_scale)
        .unwrap_or_else(|e| panic!("reference::backward: {e}"))
}

#[cfg(test)]
mod tests {
    use super::super::tests::shape;
    use super::super::{attention_forward, rel_l2};
    use super::*;
    use crate::rng::Rng;

    fn randn(rng: &mut Rng, n: usize) -> Vec<f64> {
        (0..n).map(|_| rng.normal_f64()).collect()
    }

    /// Central differences of `sum(O * dO)` w.r.t. every element of q, k and v.
    #[test]
    fn matches_finite_differences() {
        let mut rng = Rng::new(42);
        // (shape, causal): GQA with batch 2, sq < sk, and sq > sk with fully masked rows
        for (s, causal, scale) in [
            (shape(2, 3, 4, 2, 1, 8), false, None),
            (shape(2, 3, 4, 2, 1, 8), true, Some(0.7)),
            (shape(1, 5, 3, 2, 2, 8), true, None),
            (shape(1, 4, 4, 3, 1, 8), true, Some(-0.4)),
        ] {
            let (q, k, v, d_o) = (
                randn(&mut rng, s.q_len()),
                randn(&mut rng, s.kv_len()),
                randn(&mut rng, s.kv_len()),
                randn(&mut rng, s.q_len()),
            );
            let g = attention_backward(&s, &q, &k, &v, &d_o, causal, scale).unwrap();
            let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
                let o = attention_forward(&s, q, k, v, causal, scale).unwrap().o;
                dot(&o, &d_o)
            };
            let eps = 1e-6;
            for (which, grad) in [(0, &g.dq), (1, &g.dk), (2, &g.dv)] {
                for idx in 0..grad.len() {
                    let mut x = [q.clone(), k.clone(), v.clone()];
                    x[which][idx] += eps;
                    let up = loss(&x[0], &x[1], &x[2]);
                    x[which][idx] -= 2.0 * eps;
                    let down = loss(&x[0], &x[1], &x[2]);
                    let fd = (up - down) / (2.0 * eps);
                    assert!(
                        (fd - grad[idx]).abs() < 1e-7 * (1.0 + fd.abs()),
                        "{s:?} causal={causal} tensor {which} [{idx}]: fd {fd} vs {}",
                        grad[idx]
                    );
                }
            }
            if causal && s.seqlen_q > s.seqlen_k {
                // rows 0..sq-sk see no key: their dq is exactly 0
                let masked = (s.seqlen_q - s.seqlen_k) * s.heads * s.head_dim;
                assert!(g.dq[..masked].iter().all(|&x| x == 0.0));
            }
        }
    }

    #[test]
    fn gqa_sums_over_the_group() {
        // 4 query heads on 2 kv heads == 4 kv heads (duplicated) with dk, dv summed in pairs.
        let s = shape(1, 21, 37, 4, 2, 16);
        let mut rng = Rng::new(7);
        let (q, k, v, d_o) = (
            randn(&mut rng, s.q_len()),
            randn(&mut rng, s.kv_len()),
            randn(&mut rng, s.kv_len()),
            randn(&mut rng, s.q_len()),
        );
        let dup = |x: &[f64]| -> Vec<f64> {
            x.chunks(16)
                .flat_map(|c| [c, c])
                .flatten()
                .copied()
                .collect()
        };
        let pair_sum = |x: &[f64]| -> Vec<f64> {
            x.chunks(32)
                .flat_map(|c| (0..16).map(move |i| c[i] + c[16 + i]))
                .collect()
        };
        let s4 = Shape { heads_k: 4, ..s };
        for causal in [false, true] {
            let a = attention_backward(&s, &q, &k, &v, &d_o, causal, None).unwrap();
            let b = attention_backward(&s4, &q, &dup(&k), &dup(&v), &d_o, causal, None).unwrap();
            assert!(rel_l2(&a.dq, &b.dq) < 1e-14);
            assert!(rel_l2(&a.dk, &pair_sum(&b.dk)) < 1e-14);
            assert!(rel_l2(&a.dv, &pair_sum(&b.dv)) < 1e-14);
        }
    }

    #[test]
    fn empty_problems_give_zero_gradients() {
        let s = shape(1, 3, 0, 2, 1, 8);
        let q = vec![1.0; s.q_len()];
        let g = attention_backward(&s, &q, &[], &[], &q, false, None).unwrap();
        assert!(g.dq.len() == 48 && g.dq.iter().all(|&x| x == 0.0) && g.dk.is_empty());
        let s = shape(1, 0, 3, 2, 1, 8);
        let k = vec![1.0; s.kv_len()];
        let g = attention_backward(&s, &[], &k, &k, &[], true, None).unwrap();
        assert!(g.dk.len() == 24 && g.dk.iter().chain(&g.dv).all(|&x| x == 0.0));
        assert!(attention_backward(&s, &[], &k, &k, &[1.0], true, None).is_err());
    }
}
