//! Kernel layer, sm_90a: the first forward's consumer warpgroups (see `fwd`): per key
//! block S = Q K^T (SS `wgmma`), the mask, the shared online softmax, O += P V (RS
//! `wgmma`), the stage released after each product (the epilogue: `fwd_epilogue`).

use super::fwd_ctx::{
    BLOCK_N, Ctx, K_EMPTY, K_FULL, Q_EMPTY, Q_FULL, QSlot, Stage, V_FULL, WG_ROWS,
};
use super::fwd_turn::Turn;
use crate::kernels::mask::{KeyRule, Window};
use crate::kernels::scores::{AlibiBias, RowsOf, ScoreTransform, Slopes, TileRows};
use crate::ptx::inst::ScaleD;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, HalfFmt, Pred, Reg, Special};
use crate::tile::acc::AccTile;
use crate::tile::desc::{Major, WgmmaDesc};
use crate::tile::smem::{ROW_BYTES, SmemTile};

/// A consumer warpgroup's constants.
pub(super) struct Consumer {
    pub(super) fmt: HalfFmt,
    /// Of every 4 n-tiles of S, how many make P on the FMA pipe (`Variant::fma_exp2`).
    pub(super) fma_exp2: u32,
    /// A masked block checks only the window edges it crosses (`Variant::edge_masks`).
    pub(super) edge_masks: bool,
    /// Which keys a query sees (a window's bounds clamped: `left <= sk`, `right <= sq`).
    pub(super) rule: KeyRule,
    pub(super) scale_log2: Reg<F32>,
    /// The scale the softmax applies (`scale_log2`, or `cap * log2 e` under a softcap).
    pub(super) softmax_scale: Reg<F32>,
    /// A softcap's transform of the raw products (before the mask).
    pub(super) transform: Option<ScoreTransform>,
    /// With a softcap: the clean blocks take the rows' maxima from the raw products and
    /// move the reference without a branch (`OnlineSoftmax::step_deferred_from`). Set
    /// for three consumers (d64: +3.7% on an H100, bf16 8K causal cap 30), not for two
    /// (d128: -3.2%: ptxas then interleaves each `ex2` right behind its `tanh` and the
    /// in-order warp stalls on them; docs/bench/sm90_softcap_v1_h100).
    pub(super) raw_max: bool,
    /// With the TMA epilogue on the persistent grid: a tile's Q slot (where its O was
    /// staged) is released only once the next tile's first S has been issued, the wait
    /// for the store to have read it there instead of at the tile's end.
    pub(super) release_late: bool,
    /// ALiBi's slopes (the bias is added per tile's head, before the mask).
    pub(super) slopes: Option<Slopes>,
    /// `Variant::fixed_ref`: whether the cap lets a fixed softmax reference serve every
    /// row, and that reference (`OnlineSoftmax::fixed_fits`, `fixed_reference`;
    /// `fwd_softmax`).
    pub(super) fixed_ref: Option<(Reg<Pred>, Reg<F32>)>,
    pub(super) sq: Reg<B32>,
    pub(super) sk: Reg<B32>,
}

/// A consumer warpgroup's view of the CTA: its thread's first query row, lane column,
/// leader, the causal diagonal's offset `sk - sq`, and the descriptors of Q (its 64
/// rows), K and V.
pub(super) struct Wg {
    /// The warpgroup's first query row.
    pub(super) wg_row: Reg<B32>,
    pub(super) row: Reg<B32>,
    pub(super) t2: Reg<B32>,
    pub(super) lead: Reg<Pred>,
    q: WgmmaDesc,
    q0: Reg<B64>,
    k: WgmmaDesc,
    pub(super) v: WgmmaDesc,
    diag: Reg<B32>,
    turn: Option<Turn>,
    /// The tile's Q slot's Q empty barrier.
    q_empty: Addr,
    /// `release_late`: the previous tile's Q empty barrier, and whether this is the
    /// CTA's first tile (none to release).
    prev_q: Option<(Addr, Reg<Pred>)>,
    /// ALiBi's bias on this thread's rows of the tile's head.
    alibi: Option<AlibiBias>,
}

/// Which of a sliding window's edges a masked block checks (without a window: the
/// causal diagonal and the sequence end, always).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Edges {
    /// Keys past each row's last (the right edge, the sequence end) and before its first.
    Both,
    /// Keys past each row's last only.
    Right,
    /// Keys before each row's first only.
    Left,
}

impl Wg {
    /// Waits for this warpgroup's turn to issue (no-op without pingpong).
    pub(super) fn take_turn(&self, b: &mut Builder) {
        if let Some(t) = &self.turn {
            t.take(b);
        }
    }

    /// Passes the turn to the next consumer (no-op without pingpong).
    pub(super) fn pass_turn(&self, b: &mut Builder) {
        if let Some(t) = &self.turn {
            t.pass(b);
        }
    }
}

impl Consumer {
    /// The persistent kernel: this warp is done with the tile's Q and its index (one
    /// arrival of its lane 0 on the slot's Q empty, which counts every consumer warp: a
    /// tile with no key block runs no warpgroup-wide `wgmma` that would line a
    /// warpgroup's warps up, and a warp still behind must not find the slot refilled for
    /// the tile after next).
    pub(super) fn release_q(&self, b: &mut Builder, w: &Wg) {
        Self::release_slot(b, w.q_empty);
    }

    /// [`Consumer::release_q`] of the slot whose Q empty barrier is `q_empty`.
    pub(super) fn release_slot(b: &mut Builder, q_empty: Addr) {
        let lane = b.special(Special::LaneId);
        let first = b.setp_u32(Cmp::Eq, lane, 0u32);
        b.when(first, false, |b| b.mbarrier_arrive(q_empty));
    }

    /// Whether thread `tid` leads its warpgroup (its first thread: the one that arrives
    /// on the stages' empty barriers for it).
    pub(super) fn leader(b: &mut Builder, tid: Reg<B32>) -> Reg<Pred> {
        let x = b.and_b32(tid, 127u32);
        b.setp_u32(Cmp::Eq, x, 0u32)
    }

    /// The warpgroup's rows and descriptors for one tile, after its Q has landed (the
    /// `j`-th completion of Q full).
    pub(super) fn setup(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        (tid, wg, m0): (Reg<B32>, Reg<B32>, Reg<B32>),
        (turn, j): (Option<Turn>, Reg<B32>),
    ) -> Wg {
        let (d, lay, smem) = (ctx.d, &ctx.lay, ctx.smem);
        let cw = b.sub_u32(wg, 1u32);
        let lane = b.special(Special::LaneId);
        let warp = b.shr_u32(tid, 5u32);
        let warp = b.and_b32(warp, 3u32);
        let g = AccTile::lane_row(b, lane);
        let t2 = AccTile::lane_col(b, lane);
        let wg_row = b.mad_lo_u32(cw, WG_ROWS, m0);
        let row = b.mad_lo_u32(warp, 16u32, wg_row);
        let row = b.add_u32(row, g);
        let lead = Self::leader(b, tid);
        let slot = QSlot::of(b, (smem, lay), j);
        let prev_q = self.release_late.then(|| {
            let first = b.setp_u32(Cmp::Eq, j, 0u32);
            let jp = b.sub_u32(j, 1u32);
            (QSlot::of(b, (smem, lay), jp).bar(Q_EMPTY), first)
        });
        if !ctx.q_landed {
            let ph = slot.ph(b);
            b.mbarrier_wait(slot.bar(Q_FULL), ph, "Q full");
        }
        let q = WgmmaDesc::new(SmemTile::new(lay.q, ctx.block_m(), d), Major::K);
        let q_rows = b.mad_lo_u32(cw, WG_ROWS * ROW_BYTES, slot.smem);
        let q0 = q.emit(b, q_rows);
        let diag = b.sub_s32(self.sk, self.sq);
        let alibi = self.slopes.map(|slopes| {
            let base = b.mov(0u32);
            let rows = TileRows {
                base,
                row0: row,
                t2,
                of: RowsOf::Queries,
            };
            let at = (ctx.batch, ctx.head);
            AlibiBias::head(b, slopes, at, self.scale_log2, rows, (self.sq, self.sk))
        });
        Wg {
            wg_row,
            row,
            t2,
            lead,
            q,
            q0,
            k: WgmmaDesc::new(SmemTile::new(lay.k, BLOCK_N, d), Major::K),
            v: WgmmaDesc::new(SmemTile::new(lay.v, BLOCK_N, d), Major::Mn),
            diag,
            turn,
            q_empty: slot.bar(Q_EMPTY),
            prev_q,
            alibi,
        }
    }

    /// `release_late`: the previous tile's Q slot released (its O store has read it:
    /// the leader waits for that, then every warp's lane 0 arrives), unless this is the
    /// CTA's first tile. Warp-uniform; once per tile, after its first S is issued.
    pub(super) fn release_prev(&self, b: &mut Builder, w: &Wg) {
        let Some((q_empty, first)) = w.prev_q else {
            return;
        };
        b.unless_uniform(first, |b| {
            b.when(w.lead, false, |b| b.bulk_wait(0, true));
            Self::release_slot(b, q_empty);
        });
    }

    /// Issues S = Q K^T of the block at stage `at` (its K has landed): fenced, committed,
    /// not waited for.
    pub(super) fn issue_s(&self, b: &mut Builder, w: &Wg, at: &Stage) -> AccTile {
        b.comment("-- S = Q K^T --");
        let s = AccTile::for_wgmma(b, BLOCK_N);
        let s_regs = s.wgmma_regs();
        let k0 = w.k.emit(b, at.smem);
        b.wgmma_fence();
        for kk in 0..w.q.k_steps() {
            let (qd, kd) = (w.q.emit_kstep(b, w.q0, kk), w.k.emit_kstep(b, k0, kk));
            b.wgmma_ss(self.fmt, &s_regs, qd, false, kd, false, ScaleD::Imm(kk > 0));
        }
        b.wgmma_commit();
        s
    }

    /// Issues O += P V of the block at stage `at` (committed, not waited for), after
    /// waiting for its V when `wait`; `fence` when no `wgmma.fence` has followed the last
    /// writes to O and P.
    pub(super) fn issue_pv(
        &self,
        b: &mut Builder,
        v: &WgmmaDesc,
        (p, o): (&[[Reg<B32>; 4]], &AccTile),
        at: &Stage,
        (wait, fence): (bool, bool),
    ) {
        b.comment("-- O += P V --");
        if wait {
            b.mbarrier_wait(at.bar(V_FULL), at.ph, "V full");
        }
        let v0 = v.emit(b, at.smem);
        let o_regs = o.wgmma_regs();
        if fence {
            b.wgmma_fence();
        }
        for (kk, a) in p.iter().enumerate() {
            let vd = v.emit_kstep(b, v0, kk as u32);
            b.wgmma_rs(self.fmt, &o_regs, *a, vd, true, ScaleD::Imm(true));
        }
        b.wgmma_commit();
    }

    /// One arrival of this warpgroup (its `lead` thread) on stage `at`'s barrier at
    /// `base` (K or V empty).
    pub(super) fn release(b: &mut Builder, lead: Reg<Pred>, at: &Stage, base: i32) {
        b.when(lead, false, |b| b.mbarrier_arrive(at.bar(base)));
    }

    /// The score transform of the block visited `i`-th, once its S has landed: a
    /// softcap's tanh, ALiBi's bias (before any mask: a masked score stays -inf).
    pub(super) fn transform(
        &self,
        b: &mut Builder,
        (ctx, w): (&Ctx, &Wg),
        s: &mut AccTile,
        i: Reg<B32>,
    ) {
        if let Some(t) = &self.transform {
            t.apply(b, s);
        }
        if let Some(a) = &w.alibi {
            let n0 = ctx.key_row(b, i);
            a.apply(b, s, n0);
        }
    }

    /// Keys past the end, and past each row's diagonal (bottom-right) or outside its
    /// window, of the block visited `i`-th to -inf.
    pub(super) fn mask(
        &self,
        b: &mut Builder,
        (ctx, w): (&Ctx, &Wg),
        s: &mut AccTile,
        (i, edges): (Reg<B32>, Edges),
    ) {
        b.comment(match (self.rule.window(), edges) {
            (Some(_), Edges::Both) => {
                "-- mask: keys past the end, and outside each row's window --"
            }
            (Some(_), Edges::Right) => "-- mask: keys past the end or each row's window --",
            (Some(_), Edges::Left) => "-- mask: keys before each row's window --",
            (None, _) => "-- mask: keys past the end, and past each row's diagonal --",
        });
        let n0 = ctx.key_row(b, i);
        let window = self.rule.window();
        // the right edge (the sequence end, the diagonal or the window's right bound):
        // always, except for a window's left-edge blocks
        if window.is_none() || edges != Edges::Left {
            self.mask_right(b, w, s, n0);
        }
        if let Some(win) = window.filter(|_| edges != Edges::Right) {
            self.mask_left(b, (w, win), s, n0);
        }
    }

    /// Keys past each row's last (the sequence end, and its diagonal or window's right
    /// bound) on the block of first key `n0`.
    fn mask_right(&self, b: &mut Builder, w: &Wg, s: &mut AccTile, n0: Reg<B32>) {
        s.mask(b, Cmp::Gt, |b, r| {
            let limit = if self.rule.per_row() {
                let rr = b.add_u32(w.row, AccTile::row_offset(r));
                let lim = b.add_s32(rr, w.diag);
                let lim = match self.rule.window() {
                    Some(win) => b.add_s32(lim, win.right),
                    None => lim,
                };
                let lim = b.add_s32(lim, 1i32);
                b.min_s32(lim, self.sk)
            } else {
                self.sk
            };
            let rel = b.sub_s32(limit, w.t2);
            b.sub_s32(rel, n0)
        });
    }

    /// A window's left edge on the block of first key `n0`: keys before each row's
    /// first, `row + diag - left`.
    fn mask_left(&self, b: &mut Builder, (w, win): (&Wg, Window), s: &mut AccTile, n0: Reg<B32>) {
        s.mask(b, Cmp::Le, |b, r| {
            let rr = b.add_u32(w.row, AccTile::row_offset(r));
            let first = b.add_s32(rr, w.diag);
            let first = b.sub_s32(first, win.left);
            let rel = b.sub_s32(first, w.t2);
            b.sub_s32(rel, n0)
        });
    }

    /// The window edges the visit `i` crosses, as (not the right edge, not the left edge):
    /// the first `n_masked` visits cross the right one, the last `n_left` the left one.
    fn edges_not_crossed(&self, b: &mut Builder, ctx: &Ctx, i: Reg<B32>) -> Option<[Reg<Pred>; 2]> {
        let tw = ctx.window.filter(|_| self.edge_masks)?;
        let not_right = b.setp_u32(Cmp::Ge, i, ctx.n_masked);
        let l0 = b.sub_u32(ctx.n_blocks, tw.n_left);
        let not_left = b.setp_u32(Cmp::Lt, i, l0);
        Some([not_right, not_left])
    }

    /// S of the block visited `i`-th at stage `at`, alone in flight: once its K has
    /// landed and this warpgroup's turn has come, issued, waited for, K released, masked.
    pub(super) fn masked_s(
        &self,
        b: &mut Builder,
        (ctx, w): (&Ctx, &Wg),
        at: &Stage,
        i: Reg<B32>,
    ) -> AccTile {
        b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
        w.take_turn(b);
        let mut s = self.issue_s(b, w, at);
        w.pass_turn(b);
        self.release_prev(b, w);
        b.wgmma_wait(0);
        Self::release(b, w.lead, at, K_EMPTY);
        self.transform(b, (ctx, w), &mut s, i);
        match self.edges_not_crossed(b, ctx, i) {
            // each edge's pass only where the visit crosses it (no product in flight:
            // warp-uniform branches)
            Some([not_right, not_left]) => {
                b.unless_uniform(not_right, |b| {
                    self.mask(b, (ctx, w), &mut s, (i, Edges::Right))
                });
                b.unless_uniform(not_left, |b| {
                    self.mask(b, (ctx, w), &mut s, (i, Edges::Left))
                });
            }
            None => self.mask(b, (ctx, w), &mut s, (i, Edges::Both)),
        }
        s
    }
}
