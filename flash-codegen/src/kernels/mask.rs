//! Kernel layer: the key mask of one block of scores: sequence bound and the
//! bottom-right-aligned causal diagonal (query i sees keys j <= i + seqlen_k - seqlen_q).

use super::softmax::AccTiles;
use crate::ptx::{B32, Builder, Cmp, Reg};
use crate::spec::KernelPlan;
use crate::tile::frag::c_frag;

use super::softmax::NEG_INF;

/// Per-row key limits of one thread: key `j` of a row is valid iff `j < limit(row)`.
pub struct KeyMask {
    /// `limit(row) - 2t` for each of the thread's rows (`2 * mt + h`), so that an element's
    /// test is `n0 + const < limit - 2t`.
    limit_rel: Vec<Reg<B32>>,
}

impl KeyMask {
    /// `rows[r]` is the absolute query index of thread row r; `t2 = 2 * (lane & 3)`.
    pub fn new(
        b: &mut Builder,
        causal: bool,
        rows: &[Reg<B32>],
        t2: Reg<B32>,
        seqlen_q: Reg<B32>,
        seqlen_k: Reg<B32>,
    ) -> Self {
        let shift = b.sub_s32(seqlen_k, seqlen_q);
        let limit_rel = rows
            .iter()
            .map(|&row| {
                let limit = if causal {
                    let diag = b.add_s32(row, shift);
                    let diag = b.add_s32(diag, 1i32);
                    b.min_s32(diag, seqlen_k)
                } else {
                    seqlen_k
                };
                b.sub_s32(limit, t2)
            })
            .collect();
        KeyMask { limit_rel }
    }

    /// Sets the scores of invalid keys of the block starting at key `n0` to -inf.
    pub fn apply(&self, b: &mut Builder, s: &AccTiles, n0: Reg<B32>) {
        for (mt, s_mt) in s.iter().enumerate() {
            for h in 0..2 {
                let rel = b.sub_s32(self.limit_rel[2 * mt + h], n0);
                for (nt, frag) in s_mt.iter().enumerate() {
                    for e in [2 * h, 2 * h + 1] {
                        let col = 8 * nt as u32 + c_frag(e as u32).col.constant();
                        let valid = b.setp_s32(Cmp::Gt, rel, col as i32);
                        // in place: the masked and unmasked paths must join on the same registers
                        let v = b.selp_f32(frag[e], NEG_INF, valid);
                        b.assign(frag[e], v);
                    }
                }
            }
        }
    }
}

/// The causal mask seen from a key block (the backward's transposed scores S^T, rows =
/// keys, columns = queries): key `j` is visible to query `i` iff `i >= j - (seqlen_k -
/// seqlen_q)`.
pub struct QueryMask {
    /// `first_query(row 0) - 2t` for the thread's first key row; row r of the thread
    /// (m-tile r / 2, half r % 2) is key row 0 + 8 r, so one register serves every row.
    first_rel: Reg<B32>,
}

impl QueryMask {
    /// `key0` is the absolute key index of the thread's first row (its later rows are
    /// 8, 16, 24 keys further, as [`Warp::rows`](super::warp::Warp::rows) lays them out);
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
    pub fn apply(&self, b: &mut Builder, s: &AccTiles, m0: Reg<B32>) {
        for (mt, s_mt) in s.iter().enumerate() {
            for h in 0..2 {
                let rel = b.sub_s32(self.first_rel, m0);
                let rel = b.add_s32(rel, 8 * (2 * mt + h) as i32);
                for (nt, frag) in s_mt.iter().enumerate() {
                    for e in [2 * h, 2 * h + 1] {
                        let col = 8 * nt as u32 + c_frag(e as u32).col.constant();
                        let valid = b.setp_s32(Cmp::Le, rel, col as i32);
                        let v = b.selp_f32(frag[e], NEG_INF, valid);
                        b.assign(frag[e], v);
                    }
                }
            }
        }
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
    s: &AccTiles,
    (n0, s_n0): (Reg<B32>, Reg<B32>),
    seqlen_k: Reg<B32>,
    diag: Reg<B32>,
) {
    let spec = &plan.spec;
    let bn = plan.tiles.block_n();
    let end = b.add_u32(n0, bn);
    let needs_mask = b.setp_u32(Cmp::Gt, end, seqlen_k);
    let needs_mask = if spec.mask.is_causal() {
        let last = b.add_s32(n0, bn as i32 - 1);
        let crosses = b.setp_s32(Cmp::Gt, last, diag);
        b.or_pred(needs_mask, crosses)
    } else {
        needs_mask
    };
    let unmasked = b.label();
    b.bra_if(needs_mask, true, unmasked, true);
    mask.apply(b, s, s_n0);
    b.place(unmasked);
}
