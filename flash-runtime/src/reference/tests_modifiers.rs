//! Host tests of the reference's score rule ([`Modifiers`]): each modifier against a
//! naive full-matrix computation written from the definitions (docs/modifiers.md), the
//! identities (causal = window (-1, 0), a huge cap or zero slopes = plain), and the
//! backward against central finite differences of the forward.

use super::tests::{pseudo, shape};
use super::*;

/// o and lse from the definitions, one full score matrix per (batch, head).
fn naive(s: &Shape, q: &[f64], k: &[f64], v: &[f64], m: &Modifiers) -> (Vec<f64>, Vec<f64>) {
    let Shape {
        batch: b,
        seqlen_q: sq,
        seqlen_k: sk,
        heads: h,
        heads_k: hk,
        head_dim: d,
    } = *s;
    let scale = 1.0 / (d as f64).sqrt();
    let a = sk as i64 - sq as i64;
    let (mut o, mut lse) = (vec![0.0; s.q_len()], vec![f64::NEG_INFINITY; s.lse_len()]);
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..sq {
                let mut sc = vec![f64::NEG_INFINITY; sk];
                for (j, x) in sc.iter_mut().enumerate() {
                    let (ii, jj) = (i as i64, j as i64);
                    let mut ok = !(m.causal && jj > ii + a);
                    if let Some((l, r)) = m.window {
                        ok &= !(l >= 0 && jj < ii + a - l) && !(r >= 0 && jj > ii + a + r);
                    }
                    if !ok {
                        continue;
                    }
                    let qo = ((bi * sq + i) * h + hi) * d;
                    let ko = ((bi * sk + j) * hk + hi / (h / hk)) * d;
                    let raw: f64 = (0..d).map(|c| q[qo + c] * k[ko + c]).sum::<f64>() * scale;
                    let mut y = m.softcap.map_or(raw, |cap| cap * (raw / cap).tanh());
                    if let Some(sl) = &m.alibi {
                        let slope = if sl.len() == h {
                            sl[hi]
                        } else {
                            sl[bi * h + hi]
                        };
                        y -= slope * (ii + a - jj).abs() as f64;
                    }
                    *x = y;
                }
                let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                let l: f64 = sc.iter().map(|x| (x - mx).exp()).sum();
                lse[(bi * h + hi) * sq + i] = mx + l.ln();
                for (j, x) in sc.iter().enumerate() {
                    let p = (x - mx).exp() / l;
                    let (oo, vo) = (
                        ((bi * sq + i) * h + hi) * d,
                        ((bi * sk + j) * hk + hi / (h / hk)) * d,
                    );
                    for c in 0..d {
                        o[oo + c] += p * v[vo + c];
                    }
                }
            }
        }
    }
    (o, lse)
}

fn cases() -> Vec<Modifiers> {
    let mut v = Vec::new();
    for causal in [false, true] {
        let base = Modifiers::causal(causal);
        for (l, r) in [
            (-1, 0),
            (2, 0),
            (0, 3),
            (3, 2),
            (-1, -1),
            (20, 20),
            (0, 0),
            (5, -1),
        ] {
            v.push(base.clone().with_window(l, r));
        }
        v.push(base.clone().with_softcap(0.7));
        v.push(base.clone().with_softcap(5.0).with_window(4, 1));
        v.push(base.clone().with_alibi(vec![0.5, 0.25, 0.125, 0.0625]));
        v.push(
            base.clone()
                .with_alibi((0..8).map(|x| 0.1 * x as f64).collect()),
        );
        v.push(base);
    }
    v
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x == y || (x - y).abs() <= tol * (1.0 + y.abs()))
}

/// Every case, sq < sk and sq > sk, against the naive computation.
#[test]
fn modifiers_match_the_definitions() {
    for (sq, sk) in [(7, 11), (9, 4), (6, 6)] {
        let s = shape(2, sq, sk, 4, 2, 8);
        let (q, k, v) = (
            pseudo(s.q_len(), 3),
            pseudo(s.kv_len(), 4),
            pseudo(s.kv_len(), 5),
        );
        for m in cases() {
            let r = attention_forward_with(&s, &q, &k, &v, &m, None).unwrap();
            let (o, lse) = naive(&s, &q, &k, &v, &m);
            assert!(close(&r.o, &o, 1e-12), "o: {m:?} sq {sq} sk {sk}");
            assert!(close(&r.lse, &lse, 1e-12), "lse: {m:?} sq {sq} sk {sk}");
        }
    }
}

/// Causal is the window (-1, 0); a window wider than the sequence, a huge cap and zero
/// slopes change nothing.
#[test]
fn modifier_identities() {
    let s = shape(1, 13, 17, 2, 1, 16);
    let (q, k, v) = (
        pseudo(s.q_len(), 6),
        pseudo(s.kv_len(), 7),
        pseudo(s.kv_len(), 8),
    );
    let fwd = |m: &Modifiers| attention_forward_with(&s, &q, &k, &v, m, None).unwrap();
    let plain = attention_forward(&s, &q, &k, &v, false, None).unwrap();
    let causal = attention_forward(&s, &q, &k, &v, true, None).unwrap();
    assert_eq!(fwd(&Modifiers::causal(false).with_window(-1, 0)), causal);
    assert_eq!(fwd(&Modifiers::causal(false).with_window(100, 100)), plain);
    assert_eq!(fwd(&Modifiers::causal(false).with_window(-1, -1)), plain);
    assert_eq!(
        fwd(&Modifiers::causal(false).with_alibi(vec![0.0, 0.0])),
        plain
    );
    let capped = fwd(&Modifiers::causal(false).with_softcap(1e12));
    assert!(close(&capped.o, &plain.o, 1e-9) && close(&capped.lse, &plain.lse, 1e-9));
    // sq > sk: the first sq - sk rows see no key under the window (-1, 0): o = 0, lse -inf
    let s2 = shape(1, 17, 13, 2, 1, 16);
    let (q2, k2, v2) = (
        pseudo(s2.q_len(), 6),
        pseudo(s2.kv_len(), 7),
        pseudo(s2.kv_len(), 8),
    );
    let m = Modifiers::causal(false).with_window(3, 0);
    let r = attention_forward_with(&s2, &q2, &k2, &v2, &m, None).unwrap();
    for hi in 0..2 {
        for i in 0..17 {
            let empty = r.lse[hi * 17 + i] == f64::NEG_INFINITY;
            assert_eq!(empty, i < 4, "row {i}");
            let o = &r.o[(i * 2 + hi) * 16..(i * 2 + hi + 1) * 16];
            assert_eq!(o.iter().all(|&x| x == 0.0), empty, "row {i}");
        }
    }
}

/// dq, dk, dv of sum(O * dO) against central differences of the forward, per modifier.
#[test]
fn modifier_gradients_match_finite_differences() {
    let s = shape(1, 4, 6, 2, 1, 4);
    let (q, k, v, d_o) = (
        pseudo(s.q_len(), 9),
        pseudo(s.kv_len(), 10),
        pseudo(s.kv_len(), 11),
        pseudo(s.q_len(), 12),
    );
    let loss = |q: &[f64], k: &[f64], v: &[f64], m: &Modifiers| -> f64 {
        let r = attention_forward_with(&s, q, k, v, m, None).unwrap();
        r.o.iter().zip(&d_o).map(|(a, b)| a * b).sum()
    };
    let eps = 1e-6;
    // (slopes cut to the shape's 2 heads)
    let fit = |m: Modifiers| match m.alibi.clone() {
        Some(sl) => m.with_alibi(sl[..2].to_vec()),
        None => m,
    };
    for m in cases().into_iter().map(fit) {
        let g = attention_backward_with(&s, &q, &k, &v, &d_o, &m, None).unwrap();
        for (which, grad) in [(0, &g.dq), (1, &g.dk), (2, &g.dv)] {
            for e in 0..grad.len() {
                let mut x = [q.clone(), k.clone(), v.clone()];
                x[which][e] += eps;
                let up = loss(&x[0], &x[1], &x[2], &m);
                x[which][e] -= 2.0 * eps;
                let down = loss(&x[0], &x[1], &x[2], &m);
                let fd = (up - down) / (2.0 * eps);
                assert!(
                    (fd - grad[e]).abs() < 1e-6,
                    "{m:?} grad {which}[{e}]: fd {fd} vs {}",
                    grad[e]
                );
            }
        }
    }
}

/// The varlen and KV-cache references apply the rule per sequence: equal lengths and full
/// caches give the dense batch's results under every case, `[b, h]` slopes included
/// (the dense reference indexes them by batch, the per-sequence ones slice them).
#[test]
fn per_sequence_references_follow_the_rule() {
    let (b, n, h, hk, d) = (3, 9, 4, 2, 8);
    let s = shape(b, n, n, h, hk, d);
    let (q, k, v, d_o) = (
        pseudo(s.q_len(), 13),
        pseudo(s.kv_len(), 14),
        pseudo(s.kv_len(), 15),
        pseudo(s.q_len(), 16),
    );
    let vs = VarlenShape {
        cu_seqlens_q: (0..=b).map(|i| i * n).collect(),
        cu_seqlens_k: (0..=b).map(|i| i * n).collect(),
        heads: h,
        heads_k: hk,
        head_dim: d,
    };
    let mut all: Vec<Modifiers> = cases()
        .into_iter()
        .filter(|m| m.alibi.as_ref().is_none_or(|s| s.len() == h))
        .collect();
    all.push(Modifiers::causal(true).with_alibi((0..b * h).map(|x| 0.05 * x as f64).collect()));
    for m in all {
        let dense = attention_forward_with(&s, &q, &k, &v, &m, None).unwrap();
        let packed = attention_varlen_with(&vs, (&q, &k, &v), &m, None).unwrap();
        assert!(close(&packed.o, &dense.o, 1e-12), "varlen o: {m:?}");
        for (bi, hi, i) in
            (0..b).flat_map(|bi| (0..h).flat_map(move |hi| (0..n).map(move |i| (bi, hi, i))))
        {
            let (x, y) = (
                packed.lse[hi * b * n + bi * n + i],
                dense.lse[(bi * h + hi) * n + i],
            );
            assert!(x == y || (x - y).abs() < 1e-12, "varlen lse: {m:?}");
        }
        let g = attention_varlen_backward_with(&vs, (&q, &k, &v), &d_o, &m, None).unwrap();
        let w = attention_backward_with(&s, &q, &k, &v, &d_o, &m, None).unwrap();
        assert!(
            close(&g.dq, &w.dq, 1e-12) && close(&g.dk, &w.dk, 1e-12) && close(&g.dv, &w.dv, 1e-12),
            "varlen grads: {m:?}"
        );
        let full = vec![n as i32; b];
        let cache = attention_kvcache_with(&s, (&q, &k, &v), &full, &m, None).unwrap();
        assert!(
            close(&cache.o, &dense.o, 1e-12) && close(&cache.lse, &dense.lse, 1e-12),
            "kvcache: {m:?}"
        );
    }
}

/// Slopes that are neither `[heads]` nor `[batch, heads]` are an error, not a panic.
#[test]
fn wrong_slope_counts_are_errors() {
    let s = shape(3, 4, 4, 4, 2, 8);
    let (q, k, v) = (
        pseudo(s.q_len(), 1),
        pseudo(s.kv_len(), 2),
        pseudo(s.kv_len(), 3),
    );
    let m = Modifiers::causal(false).with_alibi(vec![0.1; 8]);
    let e = attention_forward_with(&s, &q, &k, &v, &m, None).unwrap_err();
    assert!(matches!(e, FlashError::ShapeMismatch(_)), "{e}");
}
