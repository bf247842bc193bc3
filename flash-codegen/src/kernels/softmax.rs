//! Kernel layer: FA2's online softmax in the exp2 domain, on accumulator fragments.
//!
//! A thread's rows of the scores are those of its [`AccTile`] (each spread over the four
//! lanes of a quad, so row reductions are two butterfly shuffles). Running max `m_i`
//! is kept unscaled; `m_i * scale_log2` is folded into one `fma` per score:
//! `p = 2^(s * scale_log2 - m_i * scale_log2)`. Rows that have seen no valid key keep
//! `m_i = -inf` and use 0 as their scaled max, so no probability is NaN (the rescale test
//! compares `-inf - -inf` on purpose: NaN compares false, nothing to rescale).

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

/// The running statistics of a thread's rows.
pub struct OnlineSoftmax {
    /// Running row max of the raw scores.
    m_i: Vec<Reg<F32>>,
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
            m_i,
            l_i,
            scale_log2,
            fma_exp2: 0,
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

    /// One key block: turns scores `s` into unnormalised probabilities in place and
    /// updates `l_i` (see [`OnlineSoftmax::step_to`]; the rows' new maxima are this
    /// warp's).
    pub fn step(&mut self, b: &mut Builder, s: &mut AccTile, o: &mut AccTile) {
        let (m_new, grows) = self.maxima(b, s);
        self.rescale_and_exp(b, s, o, &m_new, grows);
    }

    /// Each row's new max (this warp's) and whether any row's grows past the threshold.
    fn maxima(&self, b: &mut Builder, s: &AccTile) -> (Vec<Reg<F32>>, Option<Reg<Pred>>) {
        self.maxima_by(b, s.rows(), |b, row| s.row_max(b, row, self.m_i[row]))
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

    /// P = 2^(s * scale_log2 - max_scaled) in place (masked scores give 0), l_i += rowsum.
    fn exp_rows(&mut self, b: &mut Builder, s: &mut AccTile) {
        for row in 0..s.rows() {
            let l = self.exp_row(b, s, row, self.m_i[row], self.l_i[row]);
            b.assign(self.l_i[row], l);
        }
    }

    /// Row `row` of P = 2^(s * scale_log2 - max_scaled(reference)) in place; returns
    /// `sum` plus the row's probabilities.
    fn exp_row(
        &self,
        b: &mut Builder,
        s: &mut AccTile,
        row: usize,
        reference: Reg<F32>,
        sum: Reg<F32>,
    ) -> Reg<F32> {
        let ms = self.scaled_max(b, reference);
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
        (0..s.rows())
            .map(|row| s.row_max(b, row, self.m_i[row]))
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
        let old_s = b.mul_f32(self.m_i[row], self.scale_log2);
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
        let (m_new, grows) = self.maxima(b, s);
        let any = b.vote_any(grows.expect("a tile of one row or more"));
        let alpha = self.move_reference(b, any, &m_new);
        self.exp_rows(b, s);
        Rescale { any, alpha }
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
        let (m_new, grows) = self.maxima_by(b, block_max.len(), |b, row| {
            b.max_f32(self.m_i[row], block_max[row])
        });
        let any = b.vote_any(grows.expect("a tile of one row or more"));
        let mut sums = Vec::new();
        for (row, &m) in m_new.iter().enumerate() {
            let reference = b.selp_f32(m, self.m_i[row], any);
            let zero = b.mov(0.0f32);
            sums.push(self.exp_row(b, s, row, reference, zero));
        }
        let alpha = self.move_reference(b, any, &m_new);
        for (row, sum) in sums.into_iter().enumerate() {
            let l = b.add_f32(self.l_i[row], sum);
            b.assign(self.l_i[row], l);
        }
        Rescale { any, alpha }
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
                b.assign(self.m_i[row], m);
            }
        });
        alpha
    }

    /// `2^(m_old * scale_log2 - max_scaled(m))`: row `row`'s rescale to reference `m`.
    fn alpha(&self, b: &mut Builder, row: usize, m: Reg<F32>) -> Reg<F32> {
        let ms = self.scaled_max(b, m);
        let neg_ms = b.neg_f32(ms);
        let x = b.fma_f32(self.m_i[row], self.scale_log2, neg_ms);
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
                b.assign(self.m_i[row], m);
                o.scale_row(b, row, alpha);
            }
        });
        self.exp_rows(b, s);
    }

    /// Normalises `o` by `1 / l_i` and returns each row's natural-log LSE
    /// (`-inf`, with `o = 0`, for rows without a valid key).
    pub fn finish(&self, b: &mut Builder, o: &mut AccTile) -> Vec<Reg<F32>> {
        self.normalise(b, o, None)
    }

    /// Each thread row's state, to merge with other warps' states of the same rows
    /// (their O accumulators are relative to it): the scaled reference max (log2 units;
    /// `-inf` for a row without a valid key) and the row's whole sum (quad-reduced; at
    /// least 1 for a row with a key, whose largest probability is `2^(max - ref) >= 1`).
    pub fn state(&self, b: &mut Builder) -> Vec<(Reg<F32>, Reg<F32>)> {
        (0..self.m_i.len())
            .map(|row| {
                let l = AccTile::quad_sum(b, self.l_i[row]);
                let ms = self.scaled_max(b, self.m_i[row]);
                let empty = b.setp_f32(Cmp::Eq, l, 0.0f32);
                (b.selp_f32(NEG_INF, ms, empty), l)
            })
            .collect()
    }

    /// This warp's share of each row's sum `l_i`, reduced over the quad.
    pub fn row_sums(&self, b: &mut Builder) -> Vec<Reg<F32>> {
        self.l_i.iter().map(|&l| AccTile::quad_sum(b, l)).collect()
    }

    /// [`OnlineSoftmax::finish`] with the rows' whole sums `l` given (from
    /// [`OnlineSoftmax::row_sums`], added over the warps sharing the rows).
    pub fn finish_with(&self, b: &mut Builder, o: &mut AccTile, l: &[Reg<F32>]) -> Vec<Reg<F32>> {
        self.normalise(b, o, Some(l))
    }

    /// `finish` with the whole row sums `l`, or (`None`) this warp's reduced row by row.
    fn normalise(&self, b: &mut Builder, o: &mut AccTile, l: Option<&[Reg<F32>]>) -> Vec<Reg<F32>> {
        debug_assert_eq!(
            o.rows(),
            self.m_i.len(),
            "generator bug: O's rows are the state's"
        );
        let fin = self.final_rows(b, Some(o), l);
        fin.into_iter().map(|(_, lse)| lse).collect()
    }

    /// Each row's `1 / l` and LSE, O left alone (its last product may still be in
    /// flight: scale it with [`AccTile::scale_row`] once it has landed).
    pub fn finals(&self, b: &mut Builder) -> Vec<(Reg<F32>, Reg<F32>)> {
        self.final_rows(b, None, None)
    }

    /// Fresh statistics again (`m_i = -inf`, `l_i = 0`), in the same registers.
    pub fn reset(&self, b: &mut Builder) {
        for &m in &self.m_i {
            b.assign(m, NEG_INF);
        }
        for &l in &self.l_i {
            b.assign(l, 0.0f32);
        }
    }

    /// Per row `(1 / l, lse)` (`1` and `-inf` for a row without a valid key), O scaled by
    /// the first when given.
    fn final_rows(
        &self,
        b: &mut Builder,
        mut o: Option<&mut AccTile>,
        l: Option<&[Reg<F32>]>,
    ) -> Vec<(Reg<F32>, Reg<F32>)> {
        let mut fin = Vec::new();
        for row in 0..self.m_i.len() {
            let l = match l {
                Some(l) => l[row],
                None => AccTile::quad_sum(b, self.l_i[row]),
            };
            let empty = b.setp_f32(Cmp::Eq, l, 0.0f32);
            let r = b.rcp(l);
            let inv = b.selp_f32(1.0f32, r, empty);
            if let Some(o) = o.as_deref_mut() {
                o.scale_row(b, row, inv);
            }
            // lse = (m * scale_log2 + log2(l)) * ln 2
            let ms = self.scaled_max(b, self.m_i[row]);
            let lg = b.lg2(l);
            let s = b.add_f32(ms, lg);
            let v = b.mul_f32(s, LN_2);
            fin.push((inv, b.selp_f32(NEG_INF, v, empty)));
        }
        fin
    }
}

/// O's rescale of a [`OnlineSoftmax::step_deferred`]: per thread row `O *= alpha`, skipped
/// (warp-uniformly) when no row of the warp moved its reference.
pub struct Rescale {
    any: Reg<Pred>,
    alpha: Vec<Reg<F32>>,
}

impl Rescale {
    /// Applies the rescale to the completed `o`.
    pub fn apply(&self, b: &mut Builder, o: &mut AccTile) {
        assert_eq!(self.alpha.len(), o.rows(), "generator bug: rescale rows");
        b.if_uniform(self.any, |b| {
            for (row, &a) in self.alpha.iter().enumerate() {
                o.scale_row(b, row, a);
            }
        });
    }
}

/// The backward's per-row `LSE * log2 e`, so that `P = exp2(S * scale_log2 - it)`; a fully
/// masked row (LSE = -inf) gets +inf, so its P is 0 rather than NaN.
pub fn lse_log2(b: &mut Builder, lse: Reg<F32>) -> Reg<F32> {
    let masked = b.setp_f32(Cmp::Eq, lse, NEG_INF);
    let l2 = b.mul_f32(lse, std::f32::consts::LOG2_E);
    b.selp_f32(f32::INFINITY, l2, masked)
}
