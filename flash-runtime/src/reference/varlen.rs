//! CPU float64 reference of variable-length (packed) attention, forward and backward:
//! q and dO `[total_q, h, d]`, k and v `[total_k, hk, d]`, sequence `b` in rows
//! `cu_seqlens_q[b] .. cu_seqlens_q[b + 1]` of q and `cu_seqlens_k[b] .. cu_seqlens_k[b
//! + 1]` of k and v; each sequence is its own attention problem (causal bottom-right per
//! sequence), as in FlashAttention's varlen API. The lse is `[h, total_q]` (FA2's packed
//! layout). An empty sequence contributes nothing; a sequence with queries and no keys
//! gets `o = 0`, `lse = -inf` and zero gradients.

use super::{
    Modifiers, RefGrads, RefOutput, Shape, attention_backward_with, attention_forward_with,
};
use crate::error::{FlashError, Result};

/// The packed problem: offsets of each sequence and the per-row sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarlenShape {
    /// `[batch + 1]`, non-decreasing from 0: sequence `b`'s queries are rows
    /// `cu_seqlens_q[b] .. cu_seqlens_q[b + 1]`.
    pub cu_seqlens_q: Vec<usize>,
    /// `[batch + 1]`, the same for keys and values.
    pub cu_seqlens_k: Vec<usize>,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub heads_k: usize,
    /// Head dimension.
    pub head_dim: usize,
}

impl VarlenShape {
    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.cu_seqlens_q.len().saturating_sub(1)
    }

    /// Query rows of all sequences.
    pub fn total_q(&self) -> usize {
        self.cu_seqlens_q.last().copied().unwrap_or(0)
    }

    /// Key rows of all sequences.
    pub fn total_k(&self) -> usize {
        self.cu_seqlens_k.last().copied().unwrap_or(0)
    }

    fn check(&self) -> Result<()> {
        let ok = |cu: &[usize]| cu.first() == Some(&0) && cu.windows(2).all(|w| w[0] <= w[1]);
        if self.cu_seqlens_q.len() != self.cu_seqlens_k.len()
            || !ok(&self.cu_seqlens_q)
            || !ok(&self.cu_seqlens_k)
        {
            return Err(FlashError::ShapeMismatch(format!(
                "reference: cu_seqlens must be [batch + 1], non-decreasing from 0, of one \
                 length; got q {:?}, k {:?}",
                self.cu_seqlens_q, self.cu_seqlens_k
            )));
        }
        Ok(())
    }

    /// Sequence `b` as a batch-1 [`Shape`], and its query and key row ranges.
    fn sequence(&self, b: usize) -> (Shape, std::ops::Range<usize>, std::ops::Range<usize>) {
        let (q0, q1) = (self.cu_seqlens_q[b], self.cu_seqlens_q[b + 1]);
        let (k0, k1) = (self.cu_seqlens_k[b], self.cu_seqlens_k[b + 1]);
        let (h, hk, d) = (self.heads, self.heads_k, self.head_dim);
        (Shape::new(1, q1 - q0, k1 - k0, h, hk, d), q0..q1, k0..k1)
    }
}

fn rows(r: &std::ops::Range<usize>, width: usize) -> std::ops::Range<usize> {
    r.start * width..r.end * width
}

fn check_lens<T>(s: &VarlenShape, (q, k, v): (&[T], &[T], &[T])) -> Result<()> {
    s.check()?;
    let (qw, kw) = (s.heads * s.head_dim, s.heads_k * s.head_dim);
    if q.len() != s.total_q() * qw || k.len() != s.total_k() * kw || v.len() != k.len() {
        return Err(FlashError::ShapeMismatch(format!(
            "reference: total_q {} and total_k {} need q of {} and k, v of {} elements; got \
             {}, {}, {}",
            s.total_q(),
            s.total_k(),
            s.total_q() * qw,
            s.total_k() * kw,
            q.len(),
            k.len(),
            v.len()
        )));
    }
    Ok(())
}

/// Varlen forward on packed host tensors: o `[total_q, h, d]` and lse `[h, total_q]`.
pub fn attention_varlen_f64<T: Copy + Into<f64> + Sync>(
    s: &VarlenShape,
    (q, k, v): (&[T], &[T], &[T]),
    causal: bool,
    softmax_scale: Option<f64>,
) -> Result<RefOutput> {
    attention_varlen_with(s, (q, k, v), &Modifiers::causal(causal), softmax_scale)
}

/// [`attention_varlen_f64`] with the score rule `mods`, each sequence's own (its window
/// bottom-right within the sequence; ALiBi slopes `[h]` or `[batch, h]`).
pub fn attention_varlen_with<T: Copy + Into<f64> + Sync>(
    s: &VarlenShape,
    (q, k, v): (&[T], &[T], &[T]),
    mods: &Modifiers,
    softmax_scale: Option<f64>,
) -> Result<RefOutput> {
    check_lens(s, (q, k, v))?;
    let (h, qw, kw) = (s.heads, s.heads * s.head_dim, s.heads_k * s.head_dim);
    let total_q = s.total_q();
    let mut out = RefOutput {
        o: vec![0.0; total_q * qw],
        lse: vec![f64::NEG_INFINITY; h * total_q],
    };
    for b in 0..s.batch() {
        let (one, qr, kr) = s.sequence(b);
        if qr.is_empty() {
            continue;
        }
        let r = attention_forward_with(
            &one,
            &q[rows(&qr, qw)],
            &k[rows(&kr, kw)],
            &v[rows(&kr, kw)],
            &mods.for_sequence(b, h),
            softmax_scale,
        )?;
        out.o[rows(&qr, qw)].copy_from_slice(&r.o);
        for hi in 0..h {
            let sq = qr.len();
            let dst = hi * total_q + qr.start;
            out.lse[dst..dst + sq].copy_from_slice(&r.lse[hi * sq..(hi + 1) * sq]);
        }
    }
    Ok(out)
}

/// Varlen backward: gradients of `sum(O * dO)`, dq `[total_q, h, d]`, dk and dv
/// `[total_k, hk, d]`, each sequence's from its own forward.
pub fn attention_varlen_backward_f64<T: Copy + Into<f64> + Sync>(
    s: &VarlenShape,
    (q, k, v): (&[T], &[T], &[T]),
    d_o: &[T],
    causal: bool,
    softmax_scale: Option<f64>,
) -> Result<RefGrads> {
    attention_varlen_backward_with(s, (q, k, v), d_o, &Modifiers::causal(causal), softmax_scale)
}

/// [`attention_varlen_backward_f64`] with the score rule `mods` (as
/// [`attention_varlen_with`]).
pub fn attention_varlen_backward_with<T: Copy + Into<f64> + Sync>(
    s: &VarlenShape,
    (q, k, v): (&[T], &[T], &[T]),
    d_o: &[T],
    mods: &Modifiers,
    softmax_scale: Option<f64>,
) -> Result<RefGrads> {
    check_lens(s, (q, k, v))?;
    let (qw, kw) = (s.heads * s.head_dim, s.heads_k * s.head_dim);
    if d_o.len() != q.len() {
        return Err(FlashError::ShapeMismatch(format!(
            "reference: dO must be shaped like q ({} elements), got {}",
            q.len(),
            d_o.len()
        )));
    }
    let mut g = RefGrads {
        dq: vec![0.0; q.len()],
        dk: vec![0.0; k.len()],
        dv: vec![0.0; v.len()],
    };
    for b in 0..s.batch() {
        let (one, qr, kr) = s.sequence(b);
        if qr.is_empty() || kr.is_empty() {
            continue; // no scores: every gradient of the sequence is 0
        }
        let (qs, ks) = (rows(&qr, qw), rows(&kr, kw));
        let r = attention_backward_with(
            &one,
            &q[qs.clone()],
            &k[ks.clone()],
            &v[ks.clone()],
            &d_o[qs.clone()],
            &mods.for_sequence(b, s.heads),
            softmax_scale,
        )?;
        g.dq[qs].copy_from_slice(&r.dq);
        g.dk[ks.clone()].copy_from_slice(&r.dk);
        g.dv[ks].copy_from_slice(&r.dv);
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::tests::pseudo;
    use crate::reference::{attention_backward, attention_forward};

    /// Equal lengths: the packed problem is the dense batch, row for row (lse
    /// `[h, total_q]` against `[b, h, sq]`), forward and backward.
    #[test]
    fn equal_lengths_are_the_dense_batch() {
        let (b, sq, sk, h, hk, d) = (3, 5, 7, 4, 2, 8);
        let dense = Shape::new(b, sq, sk, h, hk, d);
        let s = VarlenShape {
            cu_seqlens_q: (0..=b).map(|i| i * sq).collect(),
            cu_seqlens_k: (0..=b).map(|i| i * sk).collect(),
            heads: h,
            heads_k: hk,
            head_dim: d,
        };
        let (q, k, v, d_o) = (
            pseudo(dense.q_len(), 1),
            pseudo(dense.kv_len(), 2),
            pseudo(dense.kv_len(), 3),
            pseudo(dense.q_len(), 4),
        );
        for causal in [false, true] {
            let want = attention_forward(&dense, &q, &k, &v, causal, None).unwrap();
            let got = attention_varlen_f64(&s, (&q, &k, &v), causal, None).unwrap();
            assert_eq!(got.o, want.o);
            for (bi, hi, i) in [(0, 0, 0), (2, 3, 4), (1, 2, 3)] {
                let w = want.lse[(bi * h + hi) * sq + i];
                assert_eq!(got.lse[hi * b * sq + bi * sq + i], w);
            }
            let wg = attention_backward(&dense, &q, &k, &v, &d_o, causal, None).unwrap();
            let gg = attention_varlen_backward_f64(&s, (&q, &k, &v), &d_o, causal, None);
            assert_eq!(gg.unwrap(), wg);
        }
    }

    /// Empty sequences, a sequence with queries but no keys, length-1 sequences: rows
    /// that see nothing are o = 0, lse = -inf, zero gradients; bad offsets are errors.
    #[test]
    fn empty_and_short_sequences() {
        let s = VarlenShape {
            cu_seqlens_q: vec![0, 0, 3, 4, 4, 9],
            cu_seqlens_k: vec![0, 2, 2, 3, 3, 12],
            heads: 2,
            heads_k: 1,
            head_dim: 8,
        };
        let (q, k, v) = (pseudo(9 * 16, 5), pseudo(12 * 8, 6), pseudo(12 * 8, 7));
        let r = attention_varlen_f64(&s, (&q, &k, &v), true, None).unwrap();
        // sequence 1: 3 queries, no keys
        assert!(r.o[0..3 * 16].iter().all(|&x| x == 0.0));
        assert!((0..2).all(|hi| r.lse[hi * 9..hi * 9 + 3].iter().all(|x| x.is_infinite())));
        // sequence 2: one query, one key: o = v
        assert_eq!(&r.o[3 * 16..3 * 16 + 8], &v[2 * 8..3 * 8]);
        let g = attention_varlen_backward_f64(&s, (&q, &k, &v), &q, true, None).unwrap();
        assert!(g.dq[0..3 * 16].iter().all(|&x| x == 0.0));
        assert!(g.dk[0..2 * 8].iter().all(|&x| x == 0.0)); // sequence 0: keys, no queries
        let bad = VarlenShape {
            cu_seqlens_q: vec![0, 3, 2],
            ..s.clone()
        };
        assert!(attention_varlen_f64(&bad, (&q, &k, &v), false, None).is_err());
        assert!(attention_varlen_f64(&s, (&q[1..], &k, &v), false, None).is_err());
    }
}
