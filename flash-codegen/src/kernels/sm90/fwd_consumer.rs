//! Kernel layer, sm_90a: the first forward's consumer warpgroups (see `fwd`): per key
//! block S = Q K^T (SS `wgmma`), the mask, the shared online softmax, O += P V (RS
//! `wgmma`), the stage released after each product; then the epilogue.

use super::fwd_ctx::{
    BLOCK_N, Ctx, ISSUE_BAR, K_EMPTY, K_FULL, Q_FULL, Stage, V_EMPTY, V_FULL, WG_ROWS,
};
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::inst::ScaleD;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, HalfFmt, Reg, Space, Special, Ty};
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

/// Where the epilogue writes.
pub(super) struct Out {
    pub(super) o_ptr: Reg<B64>,
    pub(super) lse_ptr: Reg<B64>,
    pub(super) o_row: Reg<B32>,
    pub(super) o_head: Reg<B32>,
    pub(super) o_batch: Reg<B64>,
    pub(super) heads: Reg<B32>,
}

/// A consumer warpgroup's view of the CTA: its thread's first query row, lane column,
/// leader, the causal diagonal's offset `sk - sq`, and the descriptors of Q (its 64
/// rows), K and V.
pub(super) struct Wg {
    row: Reg<B32>,
    t2: Reg<B32>,
    lead: Reg<crate::ptx::Pred>,
    q: WgmmaDesc,
    q0: Reg<B64>,
    k: WgmmaDesc,
    v: WgmmaDesc,
    diag: Reg<B32>,
    turn: Option<Turn>,
}

/// FA3's scheduler barrier: consumer `c` waits at named barrier `ISSUE_BAR + c` (with the
/// arrival of the consumer before it) to issue its products, then lets the next one go.
struct Turn {
    mine: Reg<B32>,
    next: Reg<B32>,
}

impl Wg {
    /// Waits for this warpgroup's turn to issue (no-op without pingpong).
    fn take_turn(&self, b: &mut Builder) {
        if let Some(t) = &self.turn {
            b.bar_sync_named(t.mine, 256);
        }
    }

    /// Passes the turn to the next consumer (no-op without pingpong).
    fn pass_turn(&self, b: &mut Builder) {
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
    /// `pingpong`: the consumers take turns to issue their products.
    pub(super) fn consume(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        (tid, wg, m0): (Reg<B32>, Reg<B32>, Reg<B32>),
        (overlap, pingpong): (bool, bool),
    ) -> (AccTile, Vec<Reg<F32>>, Wg) {
        let w = self.setup(b, ctx, (tid, wg, m0), pingpong);
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

    /// The warpgroup's rows, descriptors and turn, after Q has landed; with `pingpong`
    /// the first consumer's first turn is given.
    fn setup(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        (tid, wg, m0): (Reg<B32>, Reg<B32>, Reg<B32>),
        pingpong: bool,
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
        let lead = {
            let x = b.and_b32(tid, 127u32);
            b.setp_u32(Cmp::Eq, x, 0u32)
        };
        b.mbarrier_wait(Addr::Shared(smem, Q_FULL), 0u32, "Q full");
        let q = WgmmaDesc::new(SmemTile::new(lay.q, ctx.block_m(), d), Major::K);
        let q_rows = b.mad_lo_u32(cw, WG_ROWS * ROW_BYTES, smem);
        let q0 = q.emit(b, q_rows);
        let diag = b.sub_s32(self.sk, self.sq);
        let turn = pingpong.then(|| {
            let mine = b.add_u32(cw, ISSUE_BAR);
            let nx = b.add_u32(cw, 1u32);
            let wrap = b.setp_u32(Cmp::Eq, nx, ctx.consumers);
            let nx = b.selp_b32(0u32, nx, wrap);
            let next = b.add_u32(nx, ISSUE_BAR);
            let first = b.setp_u32(Cmp::Eq, cw, 0u32);
            b.when(first, false, |b| b.bar_arrive(mine, 256));
            Turn { mine, next }
        });
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
        }
    }

    /// Issues S = Q K^T of the block at stage `at` (its K has landed): fenced, committed,
    /// not waited for.
    fn issue_s(&self, b: &mut Builder, w: &Wg, at: &Stage) -> AccTile {
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
    fn issue_pv(
        &self,
        b: &mut Builder,
        w: &Wg,
        (p, o): (&[[Reg<B32>; 4]], &AccTile),
        at: &Stage,
        (wait, fence): (bool, bool),
    ) {
        b.comment("-- O += P V --");
        if wait {
            b.mbarrier_wait(at.bar(V_FULL), at.ph, "V full");
        }
        let v0 = w.v.emit(b, at.smem);
        let o_regs = o.wgmma_regs();
        if fence {
            b.wgmma_fence();
        }
        for (kk, a) in p.iter().enumerate() {
            let vd = w.v.emit_kstep(b, v0, kk as u32);
            b.wgmma_rs(self.fmt, &o_regs, *a, vd, true, ScaleD::Imm(true));
        }
        b.wgmma_commit();
    }

    /// One arrival of this warpgroup on stage `at`'s barrier at `base` (K or V empty).
    fn release(b: &mut Builder, w: &Wg, at: &Stage, base: i32) {
        b.when(w.lead, false, |b| b.mbarrier_arrive(at.bar(base)));
    }

    /// Keys past the end, and past each row's diagonal (bottom-right), of the block
    /// visited `i`-th to -inf.
    fn mask(&self, b: &mut Builder, (ctx, w): (&Ctx, &Wg), s: &mut AccTile, i: Reg<B32>) {
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
        b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
        w.take_turn(b);
        let mut s = self.issue_s(b, w, &at);
        w.pass_turn(b);
        b.wgmma_wait(0);
        Self::release(b, w, &at, K_EMPTY);
        self.mask(b, (ctx, w), &mut s, n);
        softmax.step(b, &mut s, o);
        let p = s.as_a(b, self.fmt, 0);
        b.mbarrier_wait(at.bar(V_FULL), at.ph, "V full");
        w.take_turn(b);
        self.issue_pv(b, w, (&p, o), &at, (false, true));
        w.pass_turn(b);
        b.wgmma_wait(0);
        Self::release(b, w, &at, V_EMPTY);
        let n1 = b.add_u32(n, 1u32);
        b.assign(n, n1);
        b.loop_end(lp);
    }

    /// FA3's intra-warpgroup overlap, key blocks visited last first: the first block's S
    /// and softmax; then per block i, S_i and P_{i-1} V_{i-1} in flight together, S_i's
    /// softmax under the second, O's rescale once it lands; the last P V after the loop.
    /// The blocks that need a mask (`ctx.n_masked`, the first visited) and the clean ones
    /// run in two copies of the loop, the second without the mask. P is carried in fixed
    /// registers, rewritten only after the product reading them is complete.
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
            let p: Vec<[Reg<B32>; 4]> = (0..BLOCK_N / 16)
                .map(|_| std::array::from_fn(|_| b.reg()))
                .collect();
            let carry = |b: &mut Builder, s: &AccTile| {
                for (dst, src) in p.iter().zip(s.as_a(b, self.fmt, 0)) {
                    for (d, x) in dst.iter().zip(src) {
                        b.assign(*d, x);
                    }
                }
            };
            b.comment("-- first block: S, mask, softmax (O is still zero: no rescale) --");
            let zero = b.mov(0u32);
            let at = ctx.stage(b, zero);
            b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
            w.take_turn(b);
            let mut s = self.issue_s(b, w, &at);
            w.pass_turn(b);
            b.wgmma_wait(0);
            Self::release(b, w, &at, K_EMPTY);
            self.mask(b, (ctx, w), &mut s, zero);
            let _ = softmax.step_deferred(b, &mut s);
            carry(b, &s);
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
                self.issue_pv(b, w, (&p, o), &pat, (false, false));
                w.pass_turn(b);
                b.wgmma_wait(1);
                Self::release(b, w, &at, K_EMPTY);
                if masked {
                    self.mask(b, (ctx, w), &mut s, i);
                }
                let rescale = softmax.step_deferred(b, &mut s);
                b.wgmma_wait(0);
                Self::release(b, w, &pat, V_EMPTY);
                rescale.apply(b, o);
                carry(b, &s);
                let i1 = b.add_u32(i, 1u32);
                b.assign(i, i1);
                b.loop_end(lp);
            }
            b.comment("-- the last block's P V --");
            let last = b.sub_u32(ctx.n_blocks, 1u32);
            let lat = ctx.stage(b, last);
            self.issue_pv(b, w, (&p, o), &lat, (true, true));
            b.wgmma_wait(0);
            Self::release(b, w, &lat, V_EMPTY);
        });
    }

    /// O (normalised) to the dtype, stored pair by pair for rows below `seqlen_q`; the
    /// LSE by lane t = 0 of each quad when `lse` is not null.
    pub(super) fn epilogue(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        out: &Out,
        (o, lse): (&AccTile, &[Reg<F32>]),
        w: &Wg,
    ) {
        b.comment("-- epilogue: O and the LSE --");
        let (row, t2) = (w.row, w.t2);
        let bo = b.cvt_u64_u32(ctx.batch);
        let bo = b.mul_lo_u64(bo, out.o_batch);
        let ho = b.mul_wide_u32(ctx.head, out.o_head);
        let base = b.add_s64(bo, ho);
        let base = b.shl_b64(base, 1);
        let base = b.add_s64(out.o_ptr, base);
        let base = b.cvta_global(base);
        let col = b.mul_wide_u32(t2, 2u32);
        let base = b.add_s64(base, col);
        let no_lse = b.setp_u64(Cmp::Eq, out.lse_ptr, 0i64);
        let other = b.setp_u32(Cmp::Ne, t2, 0u32);
        let skip_lse = b.or_pred(no_lse, other);
        // (batch * heads + head) * seqlen_q, in 64 bits: b * h * sq may pass 2^32
        let bh = b.mad_lo_u32(ctx.batch, out.heads, ctx.head);
        let lse_row0 = b.mul_wide_u32(bh, self.sq);
        let lse_row0 = b.shl_b64(lse_row0, 2);
        let lse_row0 = b.add_s64(out.lse_ptr, lse_row0);
        let lse_row0 = b.cvta_global(lse_row0);
        for r in 0..o.rows() {
            let rr = b.add_u32(row, AccTile::row_offset(r));
            let out_of = b.setp_u32(Cmp::Ge, rr, self.sq);
            let off = b.mul_wide_u32(rr, out.o_row);
            let off = b.shl_b64(off, 1);
            let at = b.add_s64(base, off);
            b.unless(out_of, |b| {
                for nt in 0..o.n_tiles() {
                    let [lo, hi] = o.pair(r, nt);
                    let w = b.pack(self.fmt, lo, hi);
                    b.st(
                        Space::Global,
                        Ty::B32,
                        Addr::Global(at, 16 * nt as i32),
                        &[w],
                    );
                }
            });
            let skip = b.or_pred(skip_lse, out_of);
            b.unless(skip, |b| {
                let a = b.mad_wide_u32(rr, 4u32, lse_row0);
                b.st(Space::Global, Ty::F32, Addr::Global(a, 0), &[lse[r]]);
            });
        }
    }
}
