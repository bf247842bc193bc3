//! CPU float64 reference of the forward pass, with exactly the kernels' semantics:
//! GQA/MQA (`heads % heads_k == 0`), bottom-right aligned causal mask (query `i` sees keys
//! `j <= i + seqlen_k - seqlen_q`), fully masked rows give `o = 0` and `lse = -inf`.
//! Naive `O(sq * sk * d)` per head, spread over threads; for tests, not for speed. The
//! backward ([`attention_backward`]) and the KV-cache forward ([`attention_kvcache_f64`]:
//! per-sequence key counts, causal bottom-right per sequence) and the varlen forward and
//! backward ([`attention_varlen_f64`], packed sequences) follow the same rules. The dense
//! forward and backward also take [`Modifiers`] (sliding window, softcap, ALiBi:
//! [`attention_forward_with`], [`attention_backward_with`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{FlashError, Result};

mod bwd;
mod kvcache;
mod modifiers;
mod varlen;
pub use bwd::{RefGrads, attention_backward, attention_backward_with, backward};
pub use kvcache::{attention_kvcache_f64, attention_kvcache_with, forward_kvcache};
pub use modifiers::Modifiers;
pub use varlen::{
    VarlenShape, attention_varlen_backward_f64, attention_varlen_backward_with,
    attention_varlen_f64, attention_varlen_with,
};

/// Problem sizes of a contiguous attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Batch size.
    pub batch: usize,
    /// Query sequence length.
    pub seqlen_q: usize,
    /// Key/value sequence length.
    pub seqlen_k: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub heads_k: usize,
    /// Head dimension.
    pub head_dim: usize,
}

impl Shape {
    /// The sizes `(batch, seqlen_q, seqlen_k, heads, heads_k, head_dim)`.
    pub const fn new(b: usize, sq: usize, sk: usize, h: usize, hk: usize, d: usize) -> Self {
        Shape {
            batch: b,
            seqlen_q: sq,
            seqlen_k: sk,
            heads: h,
            heads_k: hk,
            head_dim: d,
        }
    }

    /// Elements of q and o: `batch * seqlen_q * heads * head_dim`.
    pub fn q_len(&self) -> usize {
        self.batch * self.seqlen_q * self.heads * self.head_dim
    }
    /// Elements of k and v: `batch * seqlen_k * heads_k * head_dim`.
    pub fn kv_len(&self) -> usize {
        self.batch * self.seqlen_k * self.heads_k * self.head_dim
    }
    /// Elements of lse: `batch * heads * seqlen_q`.
    pub fn lse_len(&self) -> usize {
        self.batch * self.heads * self.seqlen_q
    }
}

/// `sum(a[i] * b[i])` with four partial sums (vectorizes; for the reference's speed).
pub(crate) fn dot<T: Copy + Into<f64>>(a: &[f64], b: &[T]) -> f64 {
    let (ac, bc) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, &y)| x * y.into())
        .sum();
    let mut acc = [0.0f64; 4];
    for (x, y) in ac.zip(bc) {
        for ((s, x), &y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y.into();
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// Runs `run(t)` for every task `t < tasks` on all cores; the results in task order.
pub(crate) fn par_map<R: Send>(tasks: usize, run: impl Fn(usize) -> R + Sync) -> Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(tasks);
    let mut results: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let t = next.fetch_add(1, Ordering::Relaxed);
                        if t >= tasks {
                            break mine;
                        }
                        mine.push((t, run(t)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    if results.len() != tasks {
        return Err(FlashError::Internal(
            "a reference worker thread panicked".into(),
        ));
    }
    results.sort_unstable_by_key(|(t, _)| *t);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}

/// Reference outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct RefOutput {
    /// `[batch, seqlen_q, heads, head_dim]`, contiguous.
    pub o: Vec<f64>,
    /// `[batch, heads, seqlen_q]`, natural log; `-inf` for fully masked rows.
    pub lse: Vec<f64>,
}

/// The last key index query `i` may see, or `None` if it sees none.
pub fn last_visible_key(i: usize, seqlen_q: usize, seqlen_k: usize, causal: bool) -> Option<usize> {
    if seqlen_k == 0 {
        return None;
    }
    if !causal {
        return Some(seqlen_k - 1);
    }
    let limit = i as i64 + seqlen_k as i64 - seqlen_q as i64;
    if limit < 0 {
        None
    } else {
        Some((limit as usize).min(seqlen_k - 1))
    }
}

const ROWS_PER_TASK: usize = 32;

/// Forward attention on contiguous host tensors q `[b, sq, h, d]`, k/v `[b, sk, hk, d]`
/// (any element type that widens to f64: f32, f64, `half::f16`, `half::bf16`).
/// `softmax_scale` defaults to `1 / sqrt(head_dim)`.
pub fn attention_forward<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k: &[T],
    v: &[T],
    causal: bool,
    softmax_scale: Option<f64>,
) -> Result<RefOutput> {
    attention_forward_with(shape, q, k, v, &Modifiers::causal(causal), softmax_scale)
}

/// [`attention_forward`] with the score rule `mods` (mask and score transforms).
pub fn attention_forward_with<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k: &[T],
    v: &[T],
    mods: &Modifiers,
    softmax_scale: Option<f64>,
) -> Result<RefOutput> {
    let Shape {
        batch: b,
        seqlen_q: sq,
        seqlen_k: sk,
        heads: h,
        heads_k: hk,
        head_dim: d,
    } = *shape;
    if q.len() != shape.q_len() || k.len() != shape.kv_len() || v.len() != shape.kv_len() {
        return Err(FlashError::ShapeMismatch(format!(
            "reference: {shape:?} needs q {} and k/v {} elements, got {}, {}, {}",
            shape.q_len(),
            shape.kv_len(),
            q.len(),
            k.len(),
            v.len()
        )));
    }
    if (hk == 0 && h != 0) || (hk != 0 && h % hk != 0) {
        return Err(FlashError::HeadsNotDivisible {
            heads: h,
            heads_k: hk,
        });
    }
    if let Some(s) = &mods.alibi
        && s.len() != h
        && s.len() != b * h
    {
        return Err(FlashError::ShapeMismatch(format!(
            "reference: ALiBi slopes must be [heads] ({h}) or [batch, heads] ({}), got {}",
            b * h,
            s.len()
        )));
    }
    let scale = softmax_scale.unwrap_or(1.0 / (d as f64).sqrt());
    let mut out = RefOutput {
        o: vec![0.0; shape.q_len()],
        lse: vec![f64::NEG_INFINITY; shape.lse_len()],
    };
    if shape.q_len() == 0 || sk == 0 {
        return Ok(out);
    }
    let chunks = sq.div_ceil(ROWS_PER_TASK);
    let tasks = b * h * chunks;
    // One task: rows [r0, r1) of head (bi, hi). Results: (task, o rows [r][d], lse rows).
    let run = |t: usize| -> (usize, Vec<f64>, Vec<f64>) {
        let (bi, rest) = (t / (h * chunks), t % (h * chunks));
        let (hi, c) = (rest / chunks, rest % chunks);
        let khi = hi / (h / hk);
        let (r0, r1) = (c * ROWS_PER_TASK, ((c + 1) * ROWS_PER_TASK).min(sq));
        let mut o = vec![0.0; (r1 - r0) * d];
        let mut lse = vec![f64::NEG_INFINITY; r1 - r0];
        let mut s = vec![0.0f64; sk];
        let mut qi = vec![0.0f64; d];
        for i in r0..r1 {
            let Some((first, last)) = mods.keys(i, sq, sk) else {
                continue;
            };
            let qo = ((bi * sq + i) * h + hi) * d;
            for (x, &y) in qi.iter_mut().zip(&q[qo..qo + d]) {
                *x = y.into();
            }
            let mut m = f64::NEG_INFINITY;
            for (j, sj) in s.iter_mut().enumerate().take(last + 1).skip(first) {
                let ko = ((bi * sk + j) * hk + khi) * d;
                *sj = mods.score(
                    dot(&qi, &k[ko..ko + d]) * scale,
                    (i, j),
                    (bi, hi, h),
                    (sq, sk),
                );
                m = m.max(*sj);
            }
            let orow = &mut o[(i - r0) * d..(i - r0 + 1) * d];
            let mut l = 0.0;
            for (j, sj) in s.iter().enumerate().take(last + 1).skip(first) {
                let p = (sj - m).exp();
                l += p;
                let vo = ((bi * sk + j) * hk + khi) * d;
                for (x, &y) in orow.iter_mut().zip(&v[vo..vo + d]) {
                    *x += p * y.into();
                }
            }
            orow.iter_mut().for_each(|x| *x /= l);
            lse[i - r0] = m + l.ln();
        }
        (t, o, lse)
    };
    let results = par_map(tasks, run)?;
    for (t, o, lse) in results {
        let (bi, rest) = (t / (h * chunks), t % (h * chunks));
        let (hi, c) = (rest / chunks, rest % chunks);
        let r0 = c * ROWS_PER_TASK;
        for (r, row) in o.chunks(d).enumerate() {
            let dst = ((bi * sq + r0 + r) * h + hi) * d;
            out.o[dst..dst + d].copy_from_slice(row);
        }
        let dst = (bi * h + hi) * sq + r0;
        out.lse[dst..dst + lse.len()].copy_from_slice(&lse);
    }
    Ok(out)
}

/// [`attention_forward`] for tests that know their shapes: returns `(o, lse)`.
///
/// # Panics
/// If the slice lengths do not match `shape` or `heads % heads_k != 0`; use
/// [`attention_forward`] to get a [`FlashError`] instead.
pub fn forward<T: Copy + Into<f64> + Sync>(
    shape: &Shape,
    q: &[T],
    k: &[T],
    v: &[T],
    causal: bool,
    softmax_scale: Option<f64>,
) -> (Vec<f64>, Vec<f64>) {
    match attention_forward(shape, q, k, v, causal, softmax_scale) {
        Ok(r) => (r.o, r.lse),
        Err(e) => panic!("reference::forward: {e}"),
    }
}

/// Relative L2 error `||got - want|| / ||want||` (plain `||got - want||` when `want` is 0),
/// over any element types that widen to f64. Pairs where both are the same infinity count
/// as equal; any NaN, or a length mismatch, gives NaN.
pub fn rel_l2<A: Copy + Into<f64>, B: Copy + Into<f64>>(got: &[A], want: &[B]) -> f64 {
    if got.len() != want.len() {
        return f64::NAN;
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (g, w) in got.iter().zip(want) {
        let (g, w): (f64, f64) = ((*g).into(), (*w).into());
        if w.is_finite() {
            den += w * w;
        }
        if g != w {
            num += (g - w) * (g - w);
        }
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_modifiers;
