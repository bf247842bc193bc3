//! Kernel layer: the key mask of one block of scores: sequence bound and the
//! bottom-right-aligned causal diagonal (query i sees keys j <= i + seqlen_k - seqlen_q).

use crate::ptx::{B32, Builder, Cmp, Reg};
use crate::spec::{KernelPlan, Mask};
use crate::tile::acc::AccTile;

/// Per-row key limits of one thread: key `j` of a row is valid iff `j < limit(row)`.
pub struct KeyMask {
    /// `limit(row) - 2t` for each of the thread's rows, so that an element's test is
    /// `n0 + const < limit - 2t`.
    limit_rel: Vec<Reg<B32>>,
}

impl KeyMask {
    /// `rows[r]` is the absolute query index of thread row r; `t2 = 2 * (lane & 3)`.
    pub fn new(
        b: &mut Builder,
        mask: Mask,
        rows: &[Reg<B32>],
        t2: Reg<B32>,
        seqlen_q: Reg<B32>,
        seqlen_k: Reg<B32>,
    ) -> Self {
        let shift = b.sub_s32(seqlen_k, seqlen_q);
        let limit_rel = rows
            .iter()
            .map(|&row| {
                let limit = match mask {
                    Mask::None => seqlen_k,
                    Mask::Causal => {
                        let diag = b.add_s32(row, shift);
                        let diag = b.add_s32(diag, 1i32);
                        b.min_s32(diag, seqlen_k)
                    }
                };
                b.sub_s32(limit, t2)
            })
            .collect();
        KeyMask { limit_rel }
    }

    /// Sets the scores of invalid keys of the block starting at key `n0` to -inf.
    pub fn apply(&self, b: &mut Builder, s: &mut AccTile, n0: Reg<B32>) {
        s.mask(b, Cmp::Gt, |b, r| b.sub_s32(self.limit_rel[r], n0));
    }
}

/// The causal mask seen from a key block (the backward's transposed scores S^T, rows =
/// keys, columns = queries): key `j` is visible to query `i` iff `i >= j - (seqlen_k -
/// seqlen_q)`.
pub struct QueryMask {
    /// `first_query(row 0) - 2t` for the thread's first key row; thread row r is key row
    /// 0 + [`AccTile::row_offset`]`(r)`, so one register serves every row.
    first_rel: Reg<B32>,
}

impl QueryMask {
    /// `key0` is the absolute key index of the thread's first row (its later rows are
    /// 8, 16, 24 keys further, as [`Warp::rows`](super::sm80::warp::Warp::rows) lays them out);
    /// `t2 = 2 * (lane & 3)`.
    pub fn new(
        b: &mut Builder,
        key0: Reg<B32>,
        t2: Reg<B32>,
        seqlen_q: Reg<B32>,
        seqlen_k: Reg<B32>,
    ) -> Self {
        let shift = b.sub_s32(seqlen_k, seqlen_q);
        let first = b.sub_s32(key0, shift);
        QueryMask {
            first_rel: b.sub_s32(first, t2),
        }
    }

    /// Sets the scores of queries that must not see the key to -inf, for the query block
    /// starting at `m0`.
    pub fn apply(&self, b: &mut Builder, s: &mut AccTile, m0: Reg<B32>) {
        s.mask(b, Cmp::Le, |b, r| {
            let rel = b.sub_s32(self.first_rel, m0);
            b.add_s32(rel, AccTile::row_offset(r) as i32)
        });
    }
}

/// Masks `s` (scores of the key block at `n0`; the warp's columns start at key `s_n0`,
/// `n0` itself unless the block's keys are split between warps) when the block crosses
/// the sequence end or the causal diagonal; other blocks skip the mask with a uniform
/// branch.
#[allow(clippy::too_many_arguments)]
pub fn mask_block(
    b: &mut Builder,
    plan: &KernelPlan,
    mask: &KeyMask,
    s: &mut AccTile,
    (n0, s_n0): (Reg<B32>, Reg<B32>),
    seqlen_k: Reg<B32>,
    diag: Reg<B32>,
) {
    let bn = plan.tiles.block_n();
    let end = b.add_u32(n0, bn);
    let past_end = b.setp_u32(Cmp::Gt, end, seqlen_k);
    let needs_mask = match plan.spec.mask {
        Mask::None => past_end,
        Mask::Causal => {
            let last = b.add_s32(n0, bn as i32 - 1);
            let crosses = b.setp_s32(Cmp::Gt, last, diag);
            b.or_pred(past_end, crosses)
        }
    };
    b.if_uniform(needs_mask, |b| mask.apply(b, s, s_n0));
}
