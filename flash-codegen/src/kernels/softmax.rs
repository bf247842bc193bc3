//! Kernel layer: FA2's online softmax in the exp2 domain, on accumulator fragments.
//!
//! A thread's rows of the scores are those of its [`AccTile`] (each spread over the four
//! lanes of a quad, so row reductions are two butterfly shuffles). Running max `m_i`
//! is kept unscaled; `m_i * scale_log2` is folded into one `fma` per score:
//! `p = 2^(s * scale_log2 - m_i * scale_log2)`. Rows that have seen no valid key keep
//! `m_i = -inf` and use 0 as their scaled max, so no probability is NaN (the rescale test
//! compares `-inf - -inf` on purpose: NaN compares false, nothing to rescale).
//!
//! Scores known to be bounded (a softcap's, within `(-cap, cap)`) may instead share one
//! fixed reference ([`OnlineSoftmax::fixed`]): no row max, no vote, no rescale, so every
//! probability's exponent follows its score at once.

mod finish;
#[cfg(test)]
mod tests;

pub use finish::{Rescale, lse_log2};

use super::exp2::exp2_fma;
use crate::ptx::{Builder, Cmp, F32, Pred, Reg};
use crate::tile::acc::AccTile;

/// log(2), to turn the log2-domain row statistics into a natural-log LSE.
const LN_2: f32 = std::f32::consts::LN_2;
pub(crate) const NEG_INF: f32 = f32::NEG_INFINITY;
/// How far (scaled, log2 units) a row max may grow past the reference max before the
/// reference moves: probabilities stay <= 2^8 = 256, far from f16/bf16/f32 overflow, and
/// keep their relative precision (floating point).
const RESCALE_LOG2: f32 = 8.0;
/// A fixed reference keeps every probability at most `2^FIXED_HIGH` (log2 units): the
/// row sums and O, in f32, then overflow only past `2^(128 - 64)` keys times values.
const FIXED_HIGH: f32 = 64.0;
/// ... and at least `2^-FIXED_LOW`: a normal f32 and bf16 (down to `2^-126`), whose
/// products with values above `2^-26` stay normal in the `mma` accumulators.
const FIXED_LOW: f32 = 100.0;

/// What a row's probabilities are taken relative to.
enum Reference {
    /// Each row's running max of the raw scores, `m_i` (unscaled).
    Running(Vec<Reg<F32>>),
    /// One reference for every row, scaled (log2 units): [`OnlineSoftmax::fixed`].
    Fixed(Reg<F32>),
}

/// The running statistics of a thread's rows.
pub struct OnlineSoftmax {
    reference: Reference,
    /// Running row sum of exp2, this thread's columns only (quad-reduced at the end).
    l_i: Vec<Reg<F32>>,
    scale_log2: Reg<F32>,
    /// Of every 4 n-tiles of a row, how many make their probabilities on the FMA pipe
    /// ([`exp2_fma`]) instead of `ex2` (0: none).
    fma_exp2: u32,
}

impl OnlineSoftmax {
    /// Fresh statistics (`m_i = -inf`, `l_i = 0`) for `rows` thread rows.
    pub fn new(b: &mut Builder, rows: usize, scale_log2: Reg<F32>) -> Self {
        let m_i = (0..rows).map(|_| b.mov(NEG_INF)).collect();
        let l_i = (0..rows).map(|_| b.mov(0.0f32)).collect();
        OnlineSoftmax {
            reference: Reference::Running(m_i),
            l_i,
            scale_log2,
            fma_exp2: 0,
        }
    }

    /// Fresh statistics (`l_i = 0`) for `rows` thread rows whose probabilities are all
    /// `2^(s * scale_log2 - reference)`, for scores whose scaled values are bounded
    /// (`reference` from [`OnlineSoftmax::fixed_reference`], where
    /// [`OnlineSoftmax::fixed_fits`]). No running max: steps make the probabilities and
    /// sums only, and never rescale O. Exact as the running max is (O and the sums share
    /// the reference); the LSE adds it back.
    pub fn fixed(b: &mut Builder, rows: usize, scale_log2: Reg<F32>, reference: Reg<F32>) -> Self {
        let l_i = (0..rows).map(|_| b.mov(0.0f32)).collect();
        OnlineSoftmax {
            reference: Reference::Fixed(reference),
            l_i,
            scale_log2,
            fma_exp2: 0,
        }
    }

    /// For scores whose scaled values `s * scale_log2` all lie within `[-bound, bound]`:
    /// whether one fixed reference serves every row of f32 / bf16 probabilities
    /// ([`OnlineSoftmax::fixed_reference`] then keeps every probability within
    /// `[2^-FIXED_LOW, 2^FIXED_HIGH]`): `bound <= (FIXED_HIGH + FIXED_LOW) / 2` (82: a
    /// softcap up to 56.8; not for f16 probabilities, whose range is 2^40). False for a
    /// NaN bound.
    pub fn fixed_fits(b: &mut Builder, bound: Reg<F32>) -> Reg<Pred> {
        b.setp_f32(Cmp::Le, bound, (FIXED_HIGH + FIXED_LOW) / 2.0)
    }

    /// The fixed reference of scores within `[-bound, bound]` (scaled), where it fits
    /// ([`OnlineSoftmax::fixed_fits`]): `max(0, bound - FIXED_HIGH)`.
    pub fn fixed_reference(b: &mut Builder, bound: Reg<F32>) -> Reg<F32> {
        let over = b.sub_f32(bound, FIXED_HIGH);
        b.max_f32(over, 0.0f32)
    }

    /// Whether the rows share a fixed reference ([`OnlineSoftmax::fixed`]).
    pub fn is_fixed(&self) -> bool {
        matches!(self.reference, Reference::Fixed(_))
    }

    /// The running row maxima, for the running max's steps only (a generator bug under a
    /// fixed reference).
    fn m_i(&self) -> &[Reg<F32>] {
        match &self.reference {
            Reference::Running(m_i) => m_i,
            Reference::Fixed(_) => panic!("generator bug: a row max under a fixed reference"),
        }
    }

    /// The probabilities of `share` n-tiles in every 4 made on the FMA pipe
    /// ([`exp2_fma`]), the rest by `ex2`: for kernels whose multi-function unit is the
    /// bottleneck (a softcap's `tanh` beside the softmax's `ex2`).
    pub fn with_fma_exp2(mut self, share: u32) -> Self {
        assert!(share <= 4, "generator bug: an FMA share of {share} in 4");
        self.fma_exp2 = share;
        self
    }

    /// `max_scaled = (m == -inf) ? 0 : m * scale_log2`.
    fn scaled_max(&self, b: &mut Builder, m: Reg<F32>) -> Reg<F32> {
        let none = b.setp_f32(Cmp::Eq, m, NEG_INF);
        let ms = b.mul_f32(m, self.scale_log2);
        b.selp_f32(0.0f32, ms, none)
    }

    /// Row `row`'s reference, scaled: `max_scaled(m_i)`, or the fixed one.
    fn scaled_reference(&self, b: &mut Builder, row: usize) -> Reg<F32> {
        match &self.reference {
            Reference::Fixed(r) => *r,
            Reference::Running(m_i) => self.scaled_max(b, m_i[row]),
        }
    }

    /// One key block: turns scores `s` into unnormalised probabilities in place and
    /// updates `l_i` (see [`OnlineSoftmax::step_to`]; the rows' new maxima are this
    /// warp's).
    pub fn step(&mut self, b: &mut Builder, s: &mut AccTile, o: &mut AccTile) {
        if self.is_fixed() {
            self.exp_rows(b, s);
            return;
        }
        let (m_new, grows) = self.maxima(b, s);
        self.rescale_and_exp(b, s, o, &m_new, grows);
    }

    /// Each row's new max (this warp's) and whether any row's grows past the threshold.
    fn maxima(&self, b: &mut Builder, s: &AccTile) -> (Vec<Reg<F32>>, Option<Reg<Pred>>) {
        let m_i = self.m_i();
        self.maxima_by(b, s.rows(), |b, row| s.row_max(b, row, m_i[row]))
    }

    /// Each of `rows` rows' new max (`max_of(row)`, the running max folded in) and
    /// whether any row's grows past the threshold, row by row.
    fn maxima_by(
        &self,
        b: &mut Builder,
        rows: usize,
        mut max_of: impl FnMut(&mut Builder, usize) -> Reg<F32>,
    ) -> (Vec<Reg<F32>>, Option<Reg<Pred>>) {
        let mut m_new = Vec::new();
        let mut grows = None;
        for row in 0..rows {
            let mx = max_of(b, row);
            grows = Some(self.grows(b, row, mx, grows));
            m_new.push(mx);
        }
        (m_new, grows)
    }

    /// P = 2^(s * scale_log2 - reference) in place (masked scores give 0), l_i += rowsum.
    fn exp_rows(&mut self, b: &mut Builder, s: &mut AccTile) {
        for row in 0..s.rows() {
            let ms = self.scaled_reference(b, row);
            let l = self.exp_row(b, s, row, ms, self.l_i[row]);
            b.assign(self.l_i[row], l);
        }
    }

    /// Row `row` of P = 2^(s * scale_log2 - ms) in place (`ms`: the row's scaled
    /// reference); returns `sum` plus the row's probabilities.
    fn exp_row(
        &self,
        b: &mut Builder,
        s: &mut AccTile,
        row: usize,
        ms: Reg<F32>,
        sum: Reg<F32>,
    ) -> Reg<F32> {
        let neg_ms = b.neg_f32(ms);
        let share = self.fma_exp2 as usize;
        let exp = |b: &mut Builder, nt: usize, y| match nt % 4 < share {
            true => exp2_fma(b, y),
            false => b.ex2(y),
        };
        s.exp2_row_with(b, row, (self.scale_log2, neg_ms), sum, exp)
    }

    /// Each row's `max(m_old, rowmax(S))` over the thread's quad (the row's columns of
    /// this warp), one per thread row.
    pub fn block_max(&self, b: &mut Builder, s: &AccTile) -> Vec<Reg<F32>> {
        let m_i = self.m_i();
        (0..s.rows())
            .map(|row| s.row_max(b, row, m_i[row]))
            .collect()
    }

    /// `acc` or-ed with whether row `row`'s max grows past the threshold to `mx`:
    /// `(m_new - m_old) * scale_log2 > RESCALE_LOG2`; -inf - -inf = NaN compares false.
    fn grows(
        &self,
        b: &mut Builder,
        row: usize,
        mx: Reg<F32>,
        acc: Option<Reg<Pred>>,
    ) -> Reg<Pred> {
        let new_s = b.mul_f32(mx, self.scale_log2);
        let old_s = b.mul_f32(self.m_i()[row], self.scale_log2);
        let diff = b.sub_f32(new_s, old_s);
        let g = b.setp_f32(Cmp::Gt, diff, RESCALE_LOG2);
        match acc {
            None => g,
            Some(acc) => b.or_pred(acc, g),
        }
    }

    /// The step with the rows' new maxima `m_new` given (from [`OnlineSoftmax::block_max`],
    /// combined over the warps sharing the rows: they must agree on them). The
    /// reference max `m_i` (and with it `l_i` and the output `o`, by
    /// `alpha = 2^(m_old - m_new)`) moves only when some row of the warp sees its max grow
    /// by more than `RESCALE_LOG2` = 8 (scaled, log2 units), or sees its first valid key;
    /// otherwise the stale max stays the reference and `p <= 2^RESCALE_LOG2`. Exact either
    /// way (O and l share the reference); it skips the O rescale on most blocks.
    pub fn step_to(
        &mut self,
        b: &mut Builder,
        s: &mut AccTile,
        o: &mut AccTile,
        m_new: &[Reg<F32>],
    ) {
        let mut grows = None;
        for (row, &mx) in m_new.iter().enumerate() {
            grows = Some(self.grows(b, row, mx, grows));
        }
        self.rescale_and_exp(b, s, o, m_new, grows);
    }

    /// [`OnlineSoftmax::step`] for an output that is still being written (an asynchronous
    /// `wgmma` adding the previous block's P V): the same new reference, P and `l_i`, but
    /// O's rescale is returned ([`Rescale::apply`] once O is complete) instead of done.
    pub fn step_deferred(&mut self, b: &mut Builder, s: &mut AccTile) -> Rescale {
        if self.is_fixed() {
            self.exp_rows(b, s);
            return Rescale::none();
        }
        let (m_new, grows) = self.maxima(b, s);
        let any = b.vote_any(grows.expect("a tile of one row or more"));
        let alpha = self.move_reference(b, any, &m_new);
        self.exp_rows(b, s);
        Rescale::new(any, alpha)
    }

    /// [`OnlineSoftmax::step_deferred`] with each row's max over the block given
    /// (`block_max`: this warp's, as the softmax sees the scores; the running max is
    /// folded in here). A softcap's kernel takes it from the raw products (`tanh` is
    /// monotone: [`ScoreTransform::block_max`](super::scores::ScoreTransform::block_max)),
    /// so the maxima need not wait for the block's `tanh`s; and the new reference is
    /// chosen without a branch (`selp` on the warp's vote), so the exponentials need not
    /// wait for one either: ptxas may interleave them with the `tanh`s, the FMA pipe's
    /// share ([`exp2_fma`]) under the multi-function unit's. `l_i`'s rescale follows them
    /// (the block's sums are added after it).
    pub fn step_deferred_from(
        &mut self,
        b: &mut Builder,
        s: &mut AccTile,
        block_max: &[Reg<F32>],
    ) -> Rescale {
        let m_i = self.m_i();
        let (m_new, grows) = self.maxima_by(b, block_max.len(), |b, row| {
            b.max_f32(m_i[row], block_max[row])
        });
        let any = b.vote_any(grows.expect("a tile of one row or more"));
        let mut sums = Vec::new();
        for (row, &m) in m_new.iter().enumerate() {
            let reference = b.selp_f32(m, m_i[row], any);
            let zero = b.mov(0.0f32);
            let ms = self.scaled_max(b, reference);
            sums.push(self.exp_row(b, s, row, ms, zero));
        }
        let alpha = self.move_reference(b, any, &m_new);
        for (row, sum) in sums.into_iter().enumerate() {
            let l = b.add_f32(self.l_i[row], sum);
            b.assign(self.l_i[row], l);
        }
        Rescale::new(any, alpha)
    }

    /// Where the warp's vote `any` holds, the rows' reference moves to `m_new` and `l_i`
    /// is rescaled; returns O's factors `alpha` (1 where it does not move), for later.
    fn move_reference(
        &mut self,
        b: &mut Builder,
        any: Reg<Pred>,
        m_new: &[Reg<F32>],
    ) -> Vec<Reg<F32>> {
        let alpha: Vec<Reg<F32>> = m_new.iter().map(|_| b.mov(1.0f32)).collect();
        b.if_uniform(any, |b| {
            b.comment("-- new reference max: l_i *= alpha; O's alpha kept for later --");
            for (row, &m) in m_new.iter().enumerate() {
                let a = self.alpha(b, row, m);
                b.assign(alpha[row], a);
                let l = b.mul_f32(self.l_i[row], a);
                b.assign(self.l_i[row], l);
                b.assign(self.m_i()[row], m);
            }
        });
        alpha
    }

    /// `2^(m_old * scale_log2 - max_scaled(m))`: row `row`'s rescale to reference `m`.
    fn alpha(&self, b: &mut Builder, row: usize, m: Reg<F32>) -> Reg<F32> {
        let ms = self.scaled_max(b, m);
        let neg_ms = b.neg_f32(ms);
        let x = b.fma_f32(self.m_i()[row], self.scale_log2, neg_ms);
        b.ex2(x)
    }

    /// The rest of a step: a new reference where any row `grows`, then P and `l_i`.
    fn rescale_and_exp(
        &mut self,
        b: &mut Builder,
        s: &mut AccTile,
        o: &mut AccTile,
        m_new: &[Reg<F32>],
        grows: Option<Reg<Pred>>,
    ) {
        assert!(
            m_new.len() == o.rows() && s.rows() == o.rows(),
            "generator bug: {} maxima for {} score rows and {} output rows",
            m_new.len(),
            s.rows(),
            o.rows()
        );
        let any = b.vote_any(grows.expect("a tile of one row or more"));
        b.if_uniform(any, |b| {
            b.comment("-- new reference max: l_i *= alpha, O *= alpha --");
            for (row, &m) in m_new.iter().enumerate() {
                // alpha: 0 while m_old = -inf
                let alpha = self.alpha(b, row, m);
                let l = b.mul_f32(self.l_i[row], alpha);
                b.assign(self.l_i[row], l);
                b.assign(self.m_i()[row], m);
                o.scale_row(b, row, alpha);
            }
        });
        self.exp_rows(b, s);
    }
}
