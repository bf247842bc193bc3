//! CPU float64 reference of the KV-cache forward, with exactly the kernels' semantics: each
//! sequence `b` attends to the first `seqlens_k[b]` rows of its cache (clamped to
//! `[0, capacity]`, as the kernels clamp), the causal mask is bottom-right per sequence
//! (query `i` sees keys `j <= i + seqlens_k[b] - seqlen_q`), and a row that sees no key
//! gets `o = 0`, `lse = -inf`.

use super::{Modifiers, RefOutput, Shape, attention_forward_with};
use crate::error::{FlashError, Result};

/// Forward attention against a KV cache on contiguous host tensors: q `[b, sq, h, d]`,
/// `k_cache` and `v_cache` `[b, capacity, hk, d]` with `shape.seqlen_k` the capacity,
/// and `seqlens_k` (`[b]`) the valid keys of each sequence, clamped to `[0, capacity]`.
/// Returns o `[b, sq, h, d]` and lse `[b, h, sq]` (natural log), contiguous.
/// `softmax_scale` defaults to `1 / sqrt(head_dim)`.
pub fn attention_kvcache_f64<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k_cache: &[T],
    v_cache: &[T],
    seqlens_k: &[i32],
    causal: bool,
    softmax_scale: Option<f64>,
) -> Result<RefOutput> {
    let mods = Modifiers::causal(causal);
    attention_kvcache_with(
        shape,
        (q, k_cache, v_cache),
        seqlens_k,
        &mods,
        softmax_scale,
    )
}

/// [`attention_kvcache_f64`] with the score rule `mods`, each sequence's own (its window
/// bottom-right against its `seqlens_k` keys; ALiBi slopes `[h]` or `[b, h]`).
pub fn attention_kvcache_with<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    (q, k_cache, v_cache): (&[T], &[T], &[T]),
    seqlens_k: &[i32],
    mods: &Modifiers,
    softmax_scale: Option<f64>,
) -> Result<RefOutput> {
    let Shape {
        batch: b,
        seqlen_q: sq,
        seqlen_k: cap,
        heads: h,
        heads_k: hk,
        head_dim: d,
    } = *shape;
    if q.len() != shape.q_len()
        || k_cache.len() != shape.kv_len()
        || v_cache.len() != shape.kv_len()
        || seqlens_k.len() != b
    {
        return Err(FlashError::ShapeMismatch(format!(
            "kvcache reference: {shape:?} needs q {}, k/v cache {} and seqlens_k {b} \
             elements, got {}, {}, {}, {}",
            shape.q_len(),
            shape.kv_len(),
            q.len(),
            k_cache.len(),
            v_cache.len(),
            seqlens_k.len()
        )));
    }
    let scale = softmax_scale.unwrap_or(1.0 / (d as f64).sqrt());
    let mut out = RefOutput {
        o: vec![0.0; shape.q_len()],
        lse: vec![f64::NEG_INFINITY; shape.lse_len()],
    };
    let (q_per_b, kv_per_b, lse_per_b) = (sq * h * d, cap * hk * d, h * sq);
    for (bi, &len) in seqlens_k.iter().enumerate() {
        let len = (len.max(0) as usize).min(cap);
        // The sequence's first `len` cache rows are one contiguous run of the cache.
        let kv = bi * kv_per_b..bi * kv_per_b + len * hk * d;
        let one = Shape::new(1, sq, len, h, hk, d);
        let qb = &q[bi * q_per_b..(bi + 1) * q_per_b];
        let r = attention_forward_with(
            &one,
            qb,
            &k_cache[kv.clone()],
            &v_cache[kv],
            &mods.for_sequence(bi, h),
            Some(scale),
        )?;
        out.o[bi * q_per_b..(bi + 1) * q_per_b].copy_from_slice(&r.o);
        out.lse[bi * lse_per_b..(bi + 1) * lse_per_b].copy_from_slice(&r.lse);
    }
    Ok(out)
}

/// [`attention_kvcache_f64`] for tests that know their shapes: returns `(o, lse)`.
///
/// # Panics
/// If the slice lengths do not match `shape` (or `seqlens_k` is not `[batch]`) or
/// `heads % heads_k != 0`; use [`attention_kvcache_f64`] to get a [`FlashError`] instead.
pub fn forward_kvcache<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k_cache: &[T],
    v_cache: &[T],
    seqlens_k: &[i32],
    causal: bool,
    softmax_scale: Option<f64>,
) -> (Vec<f64>, Vec<f64>) {
    match attention_kvcache_f64(shape, q, k_cache, v_cache, seqlens_k, causal, softmax_scale) {
        Ok(r) => (r.o, r.lse),
        Err(e) => panic!("reference::forward_kvcache: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::attention_forward;
    use crate::reference::tests::pseudo;

    fn inputs(s: &Shape) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        (
            pseudo(s.q_len(), 11),
            pseudo(s.kv_len(), 12),
            pseudo(s.kv_len(), 13),
        )
    }

    /// Full caches (and any value at or above the capacity) give the dense reference over
    /// the whole cache.
    #[test]
    fn full_caches_equal_the_dense_reference() {
        let s = Shape::new(3, 4, 19, 6, 2, 16);
        let (q, k, v) = inputs(&s);
        for causal in [false, true] {
            let dense = attention_forward(&s, &q, &k, &v, causal, Some(0.3)).unwrap();
            let got = attention_kvcache_f64(&s, &q, &k, &v, &[19, 19, 500], causal, Some(0.3));
            assert_eq!(got.unwrap(), dense, "causal {causal}");
        }
    }

    /// A sequence of length 0 (or a negative length) gets o = 0 and lse = -inf; the others
    /// are untouched.
    #[test]
    fn empty_sequences_give_zero_and_minus_infinity() {
        let s = Shape::new(3, 2, 8, 2, 1, 8);
        let (q, k, v) = inputs(&s);
        let r = attention_kvcache_f64(&s, &q, &k, &v, &[0, 8, -7], false, None).unwrap();
        let (qb, lb) = (2 * 2 * 8, 2 * 2);
        for bi in [0, 2] {
            assert!(r.o[bi * qb..(bi + 1) * qb].iter().all(|&x| x == 0.0));
            assert!(
                r.lse[bi * lb..(bi + 1) * lb]
                    .iter()
                    .all(|&x| x == f64::NEG_INFINITY)
            );
        }
        assert!(r.lse[lb..2 * lb].iter().all(|x| x.is_finite()));
    }

    /// Causal is bottom-right per sequence: query i of sq sees keys j <= i + len - sq,
    /// checked against a naive softmax for every row; rows before the sequence start see
    /// nothing.
    #[test]
    fn causal_is_bottom_right_per_sequence() {
        let s = Shape::new(2, 3, 10, 2, 2, 8);
        let (q, k, v) = inputs(&s);
        let lens = [6, 2];
        let r = attention_kvcache_f64(&s, &q, &k, &v, &lens, true, Some(0.5)).unwrap();
        for (bi, &len) in lens.iter().enumerate() {
            for i in 0..3 {
                for hi in 0..2 {
                    let (qo, li) = (((bi * 3 + i) * 2 + hi) * 8, (bi * 2 + hi) * 3 + i);
                    let last = i as i64 + len as i64 - 3;
                    if last < 0 {
                        assert_eq!(r.lse[li], f64::NEG_INFINITY, "b{bi} i{i}");
                        assert!(r.o[qo..qo + 8].iter().all(|&x| x == 0.0));
                        continue;
                    }
                    let kv = |j: usize| ((bi * 10 + j) * 2 + hi) * 8;
                    let score = |j: usize| -> f64 {
                        (0..8).map(|c| q[qo + c] * k[kv(j) + c]).sum::<f64>() * 0.5
                    };
                    let keys = 0..=last as usize;
                    let m = keys.clone().map(score).fold(f64::NEG_INFINITY, f64::max);
                    let l: f64 = keys.clone().map(|j| (score(j) - m).exp()).sum();
                    assert!((r.lse[li] - (m + l.ln())).abs() < 1e-12, "b{bi} i{i}");
                    for c in 0..8 {
                        let want: f64 = keys
                            .clone()
                            .map(|j| (score(j) - m).exp() / l * v[kv(j) + c])
                            .sum();
                        assert!((r.o[qo + c] - want).abs() < 1e-12, "b{bi} i{i} c{c}");
                    }
                }
            }
        }
    }

    #[test]
    fn wrong_lengths_are_errors() {
        let s = Shape::new(2, 2, 4, 2, 2, 8);
        let (q, k, v) = inputs(&s);
        let e = attention_kvcache_f64(&s, &q, &k, &v, &[4], false, None).unwrap_err();
        assert!(e.to_string().contains("seqlens_k 2"), "{e}");
        let e = attention_kvcache_f64(&s, &q, &k[1..], &v, &[4, 4], false, None).unwrap_err();
        assert!(matches!(e, FlashError::ShapeMismatch(_)));
    }
}
