//! Kernel layer: the key mask of one block of scores: sequence bound, the
//! bottom-right-aligned causal diagonal (query i sees keys j <= i + seqlen_k - seqlen_q)
//! and the sliding window (`i + a - left <= j <= i + a + right`, [`Window`]).

use super::params::Params;
use crate::abi::{WINDOW_LEFT, WINDOW_RIGHT};
use crate::ptx::{B32, Builder, Cmp, Reg};
use crate::spec::{KernelPlan, Mask};
use crate::tile::acc::AccTile;

/// A sliding window's bounds ([`Mask::Local`]), clamped where they are read: `left` to
/// `seqlen_k` and `right` to `seqlen_q`, where each is already unbounded, so that every
/// sum below stays within i32 whatever the caller passed (`u32::MAX` for unbounded),
/// given `seqlen_q + seqlen_k + block_m + block_n < 2^31` (the runtime checks
/// `seqlen_q + seqlen_k + 256 < 2^31` for a window).
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Keys before the diagonal a query sees.
    pub left: Reg<B32>,
    /// Keys after the diagonal a query sees.
    pub right: Reg<B32>,
}

/// Which keys a query sees: every key of the sequence, those up to its causal diagonal,
/// or its sliding window's (a kernel's [`Mask`], with the window's bounds loaded).
#[derive(Clone, Copy, Debug)]
pub enum KeyRule {
    /// Every key ([`Mask::None`]).
    All,
    /// Keys up to the bottom-right causal diagonal ([`Mask::Causal`]).
    Causal,
    /// The window's keys ([`Mask::Local`]).
    Local(Window),
}

impl KeyRule {
    /// The rule of a kernel of `mask`: a window's bounds read (and clamped) here.
    pub fn load(
        b: &mut Builder,
        p: &Params,
        mask: Mask,
        (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
    ) -> KeyRule {
        match mask {
            Mask::None => KeyRule::All,
            Mask::Causal => KeyRule::Causal,
            Mask::Local => KeyRule::Local(Window {
                left: b.min_u32(p.get(WINDOW_LEFT), seqlen_k),
                right: b.min_u32(p.get(WINDOW_RIGHT), seqlen_q),
            }),
        }
    }

    /// Whether a row's last visible key depends on the row (the causal diagonal or a
    /// window's right edge), not only on `seqlen_k`.
    pub fn per_row(self) -> bool {
        !matches!(self, KeyRule::All)
    }

    /// The window, under [`KeyRule::Local`].
    pub fn window(self) -> Option<Window> {
        match self {
            KeyRule::Local(w) => Some(w),
            _ => None,
        }
    }
}

/// Per-row key limits of one thread: key `j` of a row is valid iff `j < limit(row)` (and,
/// under a window, `j >= first(row)`).
pub struct KeyMask {
    /// `limit(row) - 2t` for each of the thread's rows, so that an element's test is
    /// `n0 + const < limit - 2t`.
    limit_rel: Vec<Reg<B32>>,
    /// Under a window: `first(row) - 2t`, the test `n0 + const >= first - 2t`.
    first_rel: Vec<Reg<B32>>,
}

impl KeyMask {
    /// `rows[r]` is the absolute query index of thread row r; `t2 = 2 * (lane & 3)`.
    pub fn new(
        b: &mut Builder,
        rule: KeyRule,
        rows: &[Reg<B32>],
        t2: Reg<B32>,
        seqlen_q: Reg<B32>,
        seqlen_k: Reg<B32>,
    ) -> Self {
        let shift = b.sub_s32(seqlen_k, seqlen_q);
        let limit_rel = rows
            .iter()
            .map(|&row| {
                let limit = match rule {
                    KeyRule::All => seqlen_k,
                    KeyRule::Causal => {
                        let diag = b.add_s32(row, shift);
                        let diag = b.add_s32(diag, 1i32);
                        b.min_s32(diag, seqlen_k)
                    }
                    KeyRule::Local(w) => {
                        let diag = b.add_s32(row, shift);
                        let last = b.add_s32(diag, w.right);
                        let end = b.add_s32(last, 1i32);
                        b.min_s32(end, seqlen_k)
                    }
                };
                b.sub_s32(limit, t2)
            })
            .collect();
        let first_rel = match rule {
            KeyRule::Local(w) => rows
                .iter()
                .map(|&row| {
                    let diag = b.add_s32(row, shift);
                    let first = b.sub_s32(diag, w.left);
                    b.sub_s32(first, t2)
                })
                .collect(),
            _ => Vec::new(),
        };
        KeyMask {
            limit_rel,
            first_rel,
        }
    }

    /// Sets the scores of invalid keys of the block starting at key `n0` to -inf.
    pub fn apply(&self, b: &mut Builder, s: &mut AccTile, n0: Reg<B32>) {
        self.apply_limit(b, s, n0);
        self.apply_first(b, s, n0);
    }

    /// Only the upper bound: keys at or past each row's limit (sequence end, causal
    /// diagonal, the window's right edge) to -inf.
    pub fn apply_limit(&self, b: &mut Builder, s: &mut AccTile, n0: Reg<B32>) {
        s.mask(b, Cmp::Gt, |b, r| b.sub_s32(self.limit_rel[r], n0));
    }

    /// Only the window's left edge: keys before each row's first visible key to -inf
    /// (nothing without a window).
    pub fn apply_first(&self, b: &mut Builder, s: &mut AccTile, n0: Reg<B32>) {
        if !self.first_rel.is_empty() {
            s.mask(b, Cmp::Le, |b, r| b.sub_s32(self.first_rel[r], n0));
        }
    }
}

/// The causal mask or the sliding window seen from a key block (the backward's
/// transposed scores S^T, rows = keys, columns = queries): key `j` is visible to query
/// `i` iff `i >= j - (seqlen_k - seqlen_q)` (causal), iff `j - shift - right <= i <= j -
/// shift + left` (window, `shift = seqlen_k - seqlen_q`).
pub struct QueryMask {
    /// `first_query(row 0) - 2t` for the thread's first key row; thread row r is key row
    /// 0 + [`AccTile::row_offset`]`(r)`, so one register serves every row.
    first_rel: Reg<B32>,
    /// Under a window: `last_query(row 0) - 2t`, the last query that sees the row's key.
    last_rel: Option<Reg<B32>>,
}

/// The queries at which a key block's mask changes: its last key's first query
/// (`lower`: columns before it miss some key) and, under a window, its first key's last
/// query (`upper`: columns after it miss some key).
#[derive(Clone, Copy, Debug)]
pub struct QueryEdges {
    /// The first query that sees the block's last key.
    pub lower: Reg<B32>,
    /// Under a window: the last query that sees the block's first key.
    pub upper: Option<Reg<B32>>,
}

impl QueryEdges {
    /// Masks the query columns `m0 .. m0 + cols` of `s` where they cross an edge, each
    /// edge's compare only where the block crosses that edge (a window's block crosses
    /// one edge or the other, seldom both); other blocks skip it with a uniform branch.
    pub fn mask(
        &self,
        b: &mut Builder,
        qmask: &QueryMask,
        s: &mut AccTile,
        m0: Reg<B32>,
        cols: u32,
    ) {
        let below = b.setp_s32(Cmp::Lt, m0, self.lower);
        match self.upper {
            None => b.if_uniform(below, |b| qmask.apply(b, s, m0)),
            Some(upper) => {
                let last = b.add_s32(m0, cols as i32 - 1);
                let above = b.setp_s32(Cmp::Gt, last, upper);
                b.if_uniform(below, |b| qmask.apply_first(b, s, m0));
                b.if_uniform(above, |b| qmask.apply_last(b, s, m0));
            }
        }
    }
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
            last_rel: None,
        }
    }

    /// The window `w`'s mask ([`QueryMask::new`]'s arguments): queries `j - shift - right
    /// ..= j - shift + left` see key `j`.
    pub fn window(
        b: &mut Builder,
        (key0, t2): (Reg<B32>, Reg<B32>),
        (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
        w: Window,
    ) -> Self {
        let shift = b.sub_s32(seqlen_k, seqlen_q);
        let diag = b.sub_s32(key0, shift);
        let first = b.sub_s32(diag, w.right);
        let last = b.add_s32(diag, w.left);
        QueryMask {
            first_rel: b.sub_s32(first, t2),
            last_rel: Some(b.sub_s32(last, t2)),
        }
    }

    /// Sets the scores of queries that must not see the key to -inf, for the query block
    /// starting at `m0`.
    pub fn apply(&self, b: &mut Builder, s: &mut AccTile, m0: Reg<B32>) {
        self.apply_first(b, s, m0);
        self.apply_last(b, s, m0);
    }

    /// Only the lower edge: queries before each key's first query to -inf.
    pub fn apply_first(&self, b: &mut Builder, s: &mut AccTile, m0: Reg<B32>) {
        s.mask(b, Cmp::Le, |b, r| {
            let rel = b.sub_s32(self.first_rel, m0);
            b.add_s32(rel, AccTile::row_offset(r) as i32)
        });
    }

    /// Only a window's upper edge: queries past each key's last query to -inf (nothing
    /// without a window).
    pub fn apply_last(&self, b: &mut Builder, s: &mut AccTile, m0: Reg<B32>) {
        if let Some(last_rel) = self.last_rel {
            s.mask(b, Cmp::Ge, |b, r| {
                let rel = b.sub_s32(last_rel, m0);
                b.add_s32(rel, AccTile::row_offset(r) as i32)
            });
        }
    }
}

/// Masks `s` (scores of the key block at `n0`; the warp's columns start at key `s_n0`,
/// `n0` itself unless the block's keys are split between warps) when the block crosses
/// the sequence end, the causal diagonal or an edge of the window (`diag`: the block's
/// first query row's diagonal key); other blocks skip the mask with a uniform branch.
#[allow(clippy::too_many_arguments)]
pub fn mask_block(
    b: &mut Builder,
    plan: &KernelPlan,
    (mask, rule): (&KeyMask, KeyRule),
    s: &mut AccTile,
    (n0, s_n0): (Reg<B32>, Reg<B32>),
    seqlen_k: Reg<B32>,
    diag: Reg<B32>,
) {
    let (bm, bn) = (plan.tiles.block_m(), plan.tiles.block_n());
    let end = b.add_u32(n0, bn);
    let past_end = b.setp_u32(Cmp::Gt, end, seqlen_k);
    let needs_mask = match rule {
        KeyRule::All => past_end,
        KeyRule::Causal => {
            let last = b.add_s32(n0, bn as i32 - 1);
            let crosses = b.setp_s32(Cmp::Gt, last, diag);
            b.or_pred(past_end, crosses)
        }
        KeyRule::Local(w) => {
            // each edge's compare only where the block crosses it: a block crosses one
            // edge or the other unless the window is narrower than the query block
            // right edge (and the sequence end): the block's last key past the first
            // row's last visible key
            let last = b.add_s32(n0, bn as i32 - 1);
            let first_last = b.add_s32(diag, w.right);
            let crosses_right = b.setp_s32(Cmp::Gt, last, first_last);
            let upper = b.or_pred(past_end, crosses_right);
            // left edge: the block's first key before the last row's first visible key
            let last_row = b.add_s32(diag, bm as i32 - 1);
            let last_first = b.sub_s32(last_row, w.left);
            let crosses_left = b.setp_s32(Cmp::Lt, n0, last_first);
            b.if_uniform(upper, |b| mask.apply_limit(b, s, s_n0));
            b.if_uniform(crosses_left, |b| mask.apply_first(b, s, s_n0));
            return;
        }
    };
    b.if_uniform(needs_mask, |b| mask.apply(b, s, s_n0));
}
