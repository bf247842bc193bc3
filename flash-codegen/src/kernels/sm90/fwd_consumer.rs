//! Kernel layer, sm_90a: the first forward's consumer warpgroups (see `fwd`): per key
//! block S = Q K^T (SS `wgmma`), the mask, the shared online softmax, O += P V (RS
//! `wgmma`), the stage released after each product; then the epilogue.

use super::fwd::{BLOCK_M, BLOCK_N, Ctx, K_EMPTY, K_FULL, Q_FULL, V_EMPTY, V_FULL, WG_ROWS};
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

impl Consumer {
    /// The key-block loop; returns O (unnormalised), the rows' LSE and the thread's first
    /// query row.
    pub(super) fn consume(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        tid: Reg<B32>,
        wg: Reg<B32>,
        m0: Reg<B32>,
    ) -> (AccTile, Vec<Reg<F32>>, Reg<B32>) {
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
        let wg_lead = {
            let x = b.and_b32(tid, 127u32);
            b.setp_u32(Cmp::Eq, x, 0u32)
        };
        b.mbarrier_wait(Addr::Shared(smem, Q_FULL), 0u32, "Q full");
        let q = WgmmaDesc::new(SmemTile::new(lay.q, BLOCK_M, d), Major::K);
        let q_rows = b.mad_lo_u32(cw, WG_ROWS * ROW_BYTES, smem);
        let q0 = q.emit(b, q_rows);
        let k = WgmmaDesc::new(SmemTile::new(lay.k, BLOCK_N, d), Major::K);
        let v = WgmmaDesc::new(SmemTile::new(lay.v, BLOCK_N, d), Major::Mn);
        let mut o = AccTile::zeros(b, 1, d);
        let mut softmax = OnlineSoftmax::new(b, o.rows(), self.scale_log2);
        let diag = b.sub_s32(self.sk, self.sq);
        let n = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, n, ctx.n_blocks);
        b.loop_exit_unless(&lp, more);
        let (st, ph, off) = ctx.stage(b, n);
        let stage_smem = b.add_u32(smem, off);
        let k_full = ctx.bar(b, st, K_FULL);
        b.mbarrier_wait(k_full, ph, "K full");
        b.comment("-- S = Q K^T --");
        let mut s = AccTile::for_wgmma(b, BLOCK_N);
        let s_regs = s.wgmma_regs();
        let k0 = k.emit(b, stage_smem);
        b.wgmma_fence();
        for kk in 0..q.k_steps() {
            let (qd, kd) = (q.emit_kstep(b, q0, kk), k.emit_kstep(b, k0, kk));
            b.wgmma_ss(self.fmt, &s_regs, qd, false, kd, false, ScaleD::Imm(kk > 0));
        }
        b.wgmma_commit();
        b.wgmma_wait(0);
        let k_empty = ctx.bar(b, st, K_EMPTY);
        b.when(wg_lead, false, |b| b.mbarrier_arrive(k_empty));
        b.comment("-- mask: keys past the end, and past each row's diagonal --");
        let n0 = b.mul_lo_u32(n, BLOCK_N);
        s.mask(b, Cmp::Gt, |b, r| {
            let limit = if self.causal {
                let rr = b.add_u32(row, AccTile::row_offset(r));
                let lim = b.add_s32(rr, diag);
                let lim = b.add_s32(lim, 1i32);
                b.min_s32(lim, self.sk)
            } else {
                self.sk
            };
            let rel = b.sub_s32(limit, t2);
            b.sub_s32(rel, n0)
        });
        softmax.step(b, &mut s, &mut o);
        let p = s.as_a(b, self.fmt, 0);
        b.comment("-- O += P V --");
        let v_full = ctx.bar(b, st, V_FULL);
        b.mbarrier_wait(v_full, ph, "V full");
        let v0 = v.emit(b, stage_smem);
        let o_regs = o.wgmma_regs();
        b.wgmma_fence();
        for (kk, a) in p.iter().enumerate() {
            let vd = v.emit_kstep(b, v0, kk as u32);
            b.wgmma_rs(self.fmt, &o_regs, *a, vd, true, ScaleD::Imm(true));
        }
        b.wgmma_commit();
        b.wgmma_wait(0);
        let v_empty = ctx.bar(b, st, V_EMPTY);
        b.when(wg_lead, false, |b| b.mbarrier_arrive(v_empty));
        let n1 = b.add_u32(n, 1u32);
        b.assign(n, n1);
        b.loop_end(lp);
        let lse = softmax.finish(b, &mut o);
        (o, lse, row)
    }

    /// O (normalised) to the dtype, stored pair by pair for rows below `seqlen_q`; the
    /// LSE by lane t = 0 of each quad when `lse` is not null.
    pub(super) fn epilogue(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        out: &Out,
        o: &AccTile,
        lse: &[Reg<F32>],
        row: Reg<B32>,
    ) {
        b.comment("-- epilogue: O and the LSE --");
        let lane = b.special(Special::LaneId);
        let t2 = AccTile::lane_col(b, lane);
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
                let a = b.cvta_global(a);
                b.st(Space::Global, Ty::F32, Addr::Global(a, 0), &[lse[r]]);
            });
        }
    }
}
