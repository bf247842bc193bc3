//! Kernel layer, sm_90a: the first forward's consumer warpgroups (see `fwd`): per key
//! block S = Q K^T (SS `wgmma`), the mask, the shared online softmax, O += P V (RS
//! `wgmma`), the stage released after each product (the epilogue: `fwd_epilogue`).

use super::fwd_ctx::{
    BLOCK_N, Ctx, ISSUE_BAR, K_EMPTY, K_FULL, Q_EMPTY, Q_FULL, QSlot, Stage, V_EMPTY, V_FULL,
    WG_ROWS,
};
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::inst::ScaleD;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, HalfFmt, Pred, Reg, Special};
use crate::tile::acc::AccTile;
use crate::tile::desc::{Major, WgmmaDesc};
use crate::tile::smem::{ROW_BYTES, SmemTile};

/// A consumer warpgroup's constants.
pub(super) struct Consumer {
    pub(super) fmt: HalfFmt,
    pub(super) causal: bool,
    pub(super) scale_log2: Reg<F32>,
    pub(super) sq: Reg<B32>,
    pub(super) sk: Reg<B32>,
}

/// A consumer warpgroup's view of the CTA: its thread's first query row, lane column,
/// leader, the causal diagonal's offset `sk - sq`, and the descriptors of Q (its 64
/// rows), K and V.
pub(super) struct Wg {
    pub(super) row: Reg<B32>,
    pub(super) t2: Reg<B32>,
    pub(super) lead: Reg<Pred>,
    q: WgmmaDesc,
    q0: Reg<B64>,
    k: WgmmaDesc,
    v: WgmmaDesc,
    diag: Reg<B32>,
    turn: Option<Turn>,
    /// The tile's Q slot's Q empty barrier.
    q_empty: Addr,
}

/// FA3's scheduler barrier: consumer `c` waits at named barrier `ISSUE_BAR + c` (with the
/// arrival of the consumer before it) to issue its products, then lets the next one go.
#[derive(Clone, Copy)]
pub(super) struct Turn {
    mine: Reg<B32>,
    next: Reg<B32>,
}

impl Wg {
    /// Waits for this warpgroup's turn to issue (no-op without pingpong).
    pub(super) fn take_turn(&self, b: &mut Builder) {
        if let Some(t) = &self.turn {
            b.bar_sync_named(t.mine, 256);
        }
    }

    /// Passes the turn to the next consumer (no-op without pingpong).
    pub(super) fn pass_turn(&self, b: &mut Builder) {
        if let Some(t) = &self.turn {
            b.bar_arrive(t.next, 256);
        }
    }
}

impl Consumer {
    /// The key-block loop; returns O (normalised), the rows' LSE and the warpgroup's view
    /// (for the epilogue). `overlap`: each block's S = Q K^T is issued before the previous
    /// block's O += P V and its softmax runs while that product is in flight (FA3's
    /// intra-warpgroup overlap); otherwise every product is waited for at once.
    /// `turn` (pingpong): the consumers take turns to issue their products. `j`: the
    /// CTA's tiles before this one (the parity of Q's barrier).
    pub(super) fn consume(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        (tid, wg, m0): (Reg<B32>, Reg<B32>, Reg<B32>),
        (overlap, turn): (bool, Option<Turn>),
        j: Reg<B32>,
    ) -> (AccTile, Vec<Reg<F32>>, Wg) {
        let w = self.setup(b, ctx, (tid, wg, m0), (turn, j));
        let mut o = AccTile::zeros(b, 1, ctx.d);
        let mut softmax = OnlineSoftmax::new(b, o.rows(), self.scale_log2);
        if overlap {
            self.blocks_overlapped(b, ctx, &w, &mut softmax, &mut o);
        } else {
            self.blocks(b, ctx, &w, &mut softmax, &mut o);
        }
        let lse = softmax.finish(b, &mut o);
        (o, lse, w)
    }

    /// The pingpong order's barriers of consumer warpgroup `wg` (1..=consumers); gives
    /// the first consumer its first turn. Once per CTA.
    pub(super) fn first_turn(&self, b: &mut Builder, wg: Reg<B32>, consumers: u32) -> Turn {
        let cw = b.sub_u32(wg, 1u32);
        let mine = b.add_u32(cw, ISSUE_BAR);
        let nx = b.add_u32(cw, 1u32);
        let wrap = b.setp_u32(Cmp::Eq, nx, consumers);
        let nx = b.selp_b32(0u32, nx, wrap);
        let next = b.add_u32(nx, ISSUE_BAR);
        let first = b.setp_u32(Cmp::Eq, cw, 0u32);
        b.when(first, false, |b| b.bar_arrive(mine, 256));
        Turn { mine, next }
    }

    /// The persistent kernel: this warp is done with the tile's Q and its index (one
    /// arrival of its lane 0 on the slot's Q empty, which counts every consumer warp: a
    /// tile with no key block runs no warpgroup-wide `wgmma` that would line a
    /// warpgroup's warps up, and a warp still behind must not find the slot refilled for
    /// the tile after next).
    pub(super) fn release_q(&self, b: &mut Builder, w: &Wg) {
        let lane = b.special(Special::LaneId);
        let first = b.setp_u32(Cmp::Eq, lane, 0u32);
        b.when(first, false, |b| b.mbarrier_arrive(w.q_empty));
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
        let row = b.mad_lo_u32(cw, WG_ROWS, m0);
        let row = b.mad_lo_u32(warp, 16u32, row);
        let row = b.add_u32(row, g);
        let lead = Self::leader(b, tid);
        let slot = QSlot::of(b, (smem, lay), j);
        if !ctx.q_landed {
            let ph = slot.ph(b);
            b.mbarrier_wait(slot.bar(Q_FULL), ph, "Q full");
        }
        let q = WgmmaDesc::new(SmemTile::new(lay.q, ctx.block_m(), d), Major::K);
        let q_rows = b.mad_lo_u32(cw, WG_ROWS * ROW_BYTES, slot.smem);
        let q0 = q.emit(b, q_rows);
        let diag = b.sub_s32(self.sk, self.sq);
        Wg {
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
        }
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

    /// Keys past the end, and past each row's diagonal (bottom-right), of the block
    /// visited `i`-th to -inf.
    pub(super) fn mask(
        &self,
        b: &mut Builder,
        (ctx, w): (&Ctx, &Wg),
        s: &mut AccTile,
        i: Reg<B32>,
    ) {
        b.comment("-- mask: keys past the end, and past each row's diagonal --");
        let n0 = ctx.key_row(b, i);
        s.mask(b, Cmp::Gt, |b, r| {
            let limit = if self.causal {
                let rr = b.add_u32(w.row, AccTile::row_offset(r));
                let lim = b.add_s32(rr, w.diag);
                let lim = b.add_s32(lim, 1i32);
                b.min_s32(lim, self.sk)
            } else {
                self.sk
            };
            let rel = b.sub_s32(limit, w.t2);
            b.sub_s32(rel, n0)
        });
    }

    /// S of the block visited `i`-th at stage `at`, alone in flight: once its K has
    /// landed and this warpgroup's turn has come, issued, waited for, K released, masked.
    fn masked_s(&self, b: &mut Builder, (ctx, w): (&Ctx, &Wg), at: &Stage, i: Reg<B32>) -> AccTile {
        b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
        w.take_turn(b);
        let mut s = self.issue_s(b, w, at);
        w.pass_turn(b);
        b.wgmma_wait(0);
        Self::release(b, w.lead, at, K_EMPTY);
        self.mask(b, (ctx, w), &mut s, i);
        s
    }

    /// Every product waited for at once.
    fn blocks(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
    ) {
        let n = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, n, ctx.n_blocks);
        b.loop_exit_unless(&lp, more);
        let at = ctx.stage(b, n);
        let mut s = self.masked_s(b, (ctx, w), &at, n);
        softmax.step(b, &mut s, o);
        let p = s.as_a(b, self.fmt, 0);
        b.mbarrier_wait(at.bar(V_FULL), at.ph, "V full");
        w.take_turn(b);
        self.issue_pv(b, &w.v, (&p, o), &at, (false, true));
        w.pass_turn(b);
        b.wgmma_wait(0);
        Self::release(b, w.lead, &at, V_EMPTY);
        let n1 = b.add_u32(n, 1u32);
        b.assign(n, n1);
        b.loop_end(lp);
    }

    /// FA3's intra-warpgroup overlap, key blocks visited last first: the first block's S
    /// and softmax; then per block i, S_i and P_{i-1} V_{i-1} in flight together, S_i's
    /// softmax under the second, O's rescale once it lands; the last P V after the loop.
    /// P is carried in fixed registers, rewritten only after the product reading them is
    /// complete.
    fn blocks_overlapped(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
    ) {
        let none = b.setp_u32(Cmp::Eq, ctx.n_blocks, 0u32);
        b.unless_uniform(none, |b| {
            let p = self.p_regs(b);
            self.first_block(b, ctx, w, softmax, &p);
            self.steady_blocks(b, ctx, w, softmax, o, &p);
            b.comment("-- the last block's P V --");
            let last = b.sub_u32(ctx.n_blocks, 1u32);
            let lat = ctx.stage(b, last);
            self.issue_pv(b, &w.v, (&p, o), &lat, (true, true));
            b.wgmma_wait(0);
            Self::release(b, w.lead, &lat, V_EMPTY);
        });
    }

    /// The registers P is carried in from one block to the next (A operand fragments).
    pub(super) fn p_regs(&self, b: &mut Builder) -> Vec<[Reg<B32>; 4]> {
        (0..BLOCK_N / 16)
            .map(|_| std::array::from_fn(|_| b.reg()))
            .collect()
    }

    /// S's probabilities, as the A operand, into the carried registers `p`.
    pub(super) fn carry(&self, b: &mut Builder, p: &[[Reg<B32>; 4]], s: &AccTile) {
        for (dst, src) in p.iter().zip(s.as_a(b, self.fmt, 0)) {
            for (d, x) in dst.iter().zip(src) {
                b.assign(*d, x);
            }
        }
    }

    /// The first visited block alone: S, mask, softmax (O is still zero: no rescale); its
    /// P carried.
    pub(super) fn first_block(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        p: &[[Reg<B32>; 4]],
    ) {
        b.comment("-- first block: S, mask, softmax (O is still zero: no rescale) --");
        let zero = b.mov(0u32);
        let at = ctx.stage(b, zero);
        let mut s = self.masked_s(b, (ctx, w), &at, zero);
        let _ = softmax.step_deferred(b, &mut s);
        self.carry(b, p, &s);
    }

    /// The visited blocks after the first: per block i, S_i and P_{i-1} V_{i-1} issued in
    /// one turn, S_i's softmax while they run. The blocks that need a mask
    /// (`ctx.n_masked`, the first visited) and the clean ones run in two copies of the
    /// loop, the second without the mask.
    pub(super) fn steady_blocks(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
        p: &[[Reg<B32>; 4]],
    ) {
        let i = b.mov(1u32);
        for (masked, end) in [(true, ctx.n_masked), (false, ctx.n_blocks)] {
            b.comment(if masked {
                "-- blocks that need the mask --"
            } else {
                "-- blocks every row sees whole: no mask --"
            });
            let lp = b.loop_start();
            let more = b.setp_u32(Cmp::Lt, i, end);
            b.loop_exit_unless(&lp, more);
            // both waits before either product: no wgmma in flight across a spin
            // loop (ptxas serialises wgmmas around divergent code: C7520)
            let at = ctx.stage(b, i);
            let prev = b.sub_u32(i, 1u32);
            let pat = ctx.stage(b, prev);
            b.mbarrier_wait(pat.bar(V_FULL), pat.ph, "V full");
            b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
            w.take_turn(b);
            let mut s = self.issue_s(b, w, &at);
            self.issue_pv(b, &w.v, (p, o), &pat, (false, false));
            w.pass_turn(b);
            b.wgmma_wait(1);
            Self::release(b, w.lead, &at, K_EMPTY);
            if masked {
                self.mask(b, (ctx, w), &mut s, i);
            }
            let rescale = softmax.step_deferred(b, &mut s);
            b.wgmma_wait(0);
            Self::release(b, w.lead, &pat, V_EMPTY);
            rescale.apply(b, o);
            self.carry(b, p, &s);
            let i1 = b.add_u32(i, 1u32);
            b.assign(i, i1);
            b.loop_end(lp);
        }
    }
}
