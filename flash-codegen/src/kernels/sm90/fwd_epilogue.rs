//! Kernel layer, sm_90a: the forward consumers' epilogue (see `fwd`): O normalised,
//! converted and stored from the accumulator layout, and the rows' LSE.

use super::fwd_consumer::{Consumer, Wg};
use super::fwd_ctx::Ctx;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, Reg, Space, Ty};
use crate::tile::acc::AccTile;

/// Where the epilogue writes.
pub(super) struct Out {
    pub(super) o_ptr: Reg<B64>,
    pub(super) lse_ptr: Reg<B64>,
    pub(super) o_row: Reg<B32>,
    pub(super) o_head: Reg<B32>,
    pub(super) o_batch: Reg<B64>,
    pub(super) heads: Reg<B32>,
}

/// Whose rows a warpgroup's epilogue stores: the tile's batch and head, the thread's
/// first query row and lane column.
pub(super) struct Rows {
    pub(super) batch: Reg<B32>,
    pub(super) head: Reg<B32>,
    pub(super) row: Reg<B32>,
    pub(super) t2: Reg<B32>,
}

impl Wg {
    /// This warpgroup's rows of `ctx`'s tile.
    pub(super) fn rows(&self, ctx: &Ctx) -> Rows {
        Rows {
            batch: ctx.batch,
            head: ctx.head,
            row: self.row,
            t2: self.t2,
        }
    }
}

impl Consumer {
    /// O (normalised) to the dtype, stored pair by pair for rows below `seqlen_q`; the
    /// LSE by lane t = 0 of each quad when `lse` is not null.
    pub(super) fn epilogue(
        &self,
        b: &mut Builder,
        at: &Rows,
        out: &Out,
        (o, lse): (&AccTile, &[Reg<F32>]),
    ) {
        b.comment("-- epilogue: O and the LSE --");
        let (row, t2) = (at.row, at.t2);
        let bo = b.cvt_u64_u32(at.batch);
        let bo = b.mul_lo_u64(bo, out.o_batch);
        let ho = b.mul_wide_u32(at.head, out.o_head);
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
        let bh = b.mad_lo_u32(at.batch, out.heads, at.head);
        let lse_row0 = b.mul_wide_u32(bh, self.sq);
        let lse_row0 = b.shl_b64(lse_row0, 2);
        let lse_row0 = b.add_s64(out.lse_ptr, lse_row0);
        let lse_row0 = b.cvta_global(lse_row0);
        debug_assert_eq!(lse.len(), o.rows(), "generator bug: one LSE per row");
        for (r, &lse_r) in lse.iter().enumerate() {
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
                b.st(Space::Global, Ty::F32, Addr::Global(a, 0), &[lse_r]);
            });
        }
    }
}
