//! Kernel layer: the end of [`OnlineSoftmax`]'s rows (O normalised, the LSE, the state
//! that merges with other warps'), and O's deferred rescale ([`Rescale`]).

use super::{LN_2, NEG_INF, OnlineSoftmax, Reference};
use crate::ptx::{Builder, Cmp, F32, Pred, Reg};
use crate::tile::acc::AccTile;

impl OnlineSoftmax {
    /// Normalises `o` by `1 / l_i` and returns each row's natural-log LSE
    /// (`-inf`, with `o = 0`, for rows without a valid key).
    pub fn finish(&self, b: &mut Builder, o: &mut AccTile) -> Vec<Reg<F32>> {
        self.normalise(b, o, None)
    }

    /// Each thread row's state, to merge with other warps' states of the same rows
    /// (their O accumulators are relative to it): the scaled reference (log2 units;
    /// `-inf` for a row without a valid key) and the row's whole sum (quad-reduced; at
    /// least 1 for a row with a key under a running max, whose largest probability is
    /// `2^(max - ref) >= 1`).
    pub fn state(&self, b: &mut Builder) -> Vec<(Reg<F32>, Reg<F32>)> {
        (0..self.l_i.len())
            .map(|row| {
                let l = AccTile::quad_sum(b, self.l_i[row]);
                let ms = self.scaled_reference(b, row);
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
            self.l_i.len(),
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

    /// Fresh statistics again (`m_i = -inf` where the max runs, `l_i = 0`), in the same
    /// registers.
    pub fn reset(&self, b: &mut Builder) {
        if let Reference::Running(m_i) = &self.reference {
            for &m in m_i {
                b.assign(m, NEG_INF);
            }
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
        for row in 0..self.l_i.len() {
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
            // lse = (reference * scale_log2 + log2(l)) * ln 2
            let ms = self.scaled_reference(b, row);
            let lg = b.lg2(l);
            let s = b.add_f32(ms, lg);
            let v = b.mul_f32(s, LN_2);
            fin.push((inv, b.selp_f32(NEG_INF, v, empty)));
        }
        fin
    }
}

/// O's rescale of a [`OnlineSoftmax::step_deferred`]: per thread row `O *= alpha`, skipped
/// (warp-uniformly) when no row of the warp moved its reference; none at all under a
/// fixed reference.
pub struct Rescale {
    moved: Option<(Reg<Pred>, Vec<Reg<F32>>)>,
}

impl Rescale {
    /// Per thread row `O *= alpha[row]` where the warp's vote `any` holds.
    pub(super) fn new(any: Reg<Pred>, alpha: Vec<Reg<F32>>) -> Self {
        Rescale {
            moved: Some((any, alpha)),
        }
    }

    /// No rescale: the reference never moves.
    pub(super) fn none() -> Self {
        Rescale { moved: None }
    }

    /// Applies the rescale to the completed `o`.
    pub fn apply(&self, b: &mut Builder, o: &mut AccTile) {
        let Some((any, alpha)) = &self.moved else {
            return;
        };
        assert_eq!(alpha.len(), o.rows(), "generator bug: rescale rows");
        b.if_uniform(*any, |b| {
            for (row, &a) in alpha.iter().enumerate() {
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
