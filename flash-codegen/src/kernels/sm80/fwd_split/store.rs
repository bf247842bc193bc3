//! Kernel layer: the split-KV forward's stores: with one split O (element type) and the
//! LSE to the caller's tensors, with more the split's partial O (f32) and LSE in the
//! packed order of [`crate::abi::decode`].

use super::SplitBlock;
use crate::abi::{
    HEAD_DIM, HEADS, HEADS_PER_KV, LSE, LSE_ACCUM, NUM_SPLITS, O, O_ACCUM, SEQLEN_Q, TensorArgs,
};
use crate::kernels::params::{Params, row_stats_base};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, Reg, Space, Special, Ty};
use crate::tile::acc::AccTile;

impl SplitBlock<'_> {
    /// O in the element type at `o[batch, position, head]`, the LSE at
    /// `lse[batch, head, position]` when the lse pointer is not null.
    pub(super) fn store_output(&self, b: &mut Builder, o: &AccTile, lse: &[Reg<F32>]) {
        let (p, q) = (&self.p, &self.q);
        let hpk = p.get(HEADS_PER_KV);
        let o_batch = {
            let zero = b.mov(0u32);
            p.tensor(b, &O, q.batch, zero, zero)
        };
        let head_dim = p.get(HEAD_DIM);
        let col_bytes = b.shl_b32(q.t2, 1u32);
        let col_bytes = b.cvt_u64_u32(col_bytes);
        let lse_on = b.setp_u64(Cmp::Ne, p.get(LSE), 0i64);
        let quad0 = b.setp_u32(Cmp::Eq, q.t2, 0u32);
        let lse_on = b.and_pred(lse_on, quad0);
        for (r, &row) in q.rows.iter().enumerate() {
            let past = b.setp_u32(Cmp::Ge, row, q.q_rows);
            b.unless(past, |b| {
                let (pos, head) = packed_coords(b, (q.m0, row), (hpk, q.head));
                let addr = row_addr_of(b, p, &O, o_batch, pos, head);
                let addr = b.add_s64(addr, col_bytes);
                for nt in 0..o.n_tiles() {
                    let in_problem = b.setp_u32(Cmp::Gt, head_dim, 8 * nt as u32);
                    let [lo, hi] = o.pair(r, nt);
                    let word = b.pack(self.fmt, lo, hi);
                    b.when(in_problem, false, |b| {
                        let at = Addr::Global(addr, 16 * nt as i32);
                        b.st(Space::Global, Ty::B32, at, &[word])
                    });
                }
                let at = row_stats_base(b, p, LSE, p.get(HEADS), q.batch, head, pos);
                b.when(lse_on, false, |b| {
                    b.st(Space::Global, Ty::F32, Addr::Global(at, 0), &[lse[r]])
                });
            });
        }
    }

    /// This split's partial O (f32, every kernel column) and LSE, at packed row
    /// `(split * batches + batch) * heads * seqlen_q + kv_head * heads_per_kv * seqlen_q +
    /// m0 + row`.
    pub(super) fn store_partials(&self, b: &mut Builder, o: &AccTile, lse: &[Reg<F32>]) {
        let (p, q) = (&self.p, &self.q);
        let d = self.plan.spec.head_dim;
        let batches = {
            let nz = b.special(Special::NCtaIdZ);
            b.div_u32(nz, p.get(NUM_SPLITS))
        };
        let rows = b.mul_lo_u32(p.get(HEADS), p.get(SEQLEN_Q));
        let group = b.mul_lo_u32(q.head, p.get(SEQLEN_Q)); // kv_head * heads_per_kv * seqlen_q
        let sb = b.mad_lo_u32(self.split, batches, q.batch);
        let row0 = b.mul_wide_u32(sb, rows);
        let group = b.cvt_u64_u32(group);
        let row0 = b.add_s64(row0, group);
        let m0 = b.cvt_u64_u32(q.m0);
        let row0 = b.add_s64(row0, m0);
        let o_acc = b.cvta_global(p.get(O_ACCUM));
        let lse_acc = b.cvta_global(p.get(LSE_ACCUM));
        let col_bytes = b.shl_b32(q.t2, 2u32);
        let col_bytes = b.cvt_u64_u32(col_bytes);
        let quad0 = b.setp_u32(Cmp::Eq, q.t2, 0u32);
        for (r, &row) in q.rows.iter().enumerate() {
            let past = b.setp_u32(Cmp::Ge, row, q.q_rows);
            b.unless(past, |b| {
                let row64 = b.cvt_u64_u32(row);
                let idx = b.add_s64(row0, row64);
                let off = b.mul_lo_u64(idx, 4 * i64::from(d));
                let at = b.add_s64(o_acc, off);
                let at = b.add_s64(at, col_bytes);
                for nt in 0..o.n_tiles() {
                    let pair = o.pair(r, nt);
                    let addr = Addr::Global(at, 32 * nt as i32);
                    b.st(Space::Global, Ty::F32, addr, &pair);
                }
                let off = b.shl_b64(idx, 2);
                let at = b.add_s64(lse_acc, off);
                b.when(quad0, false, |b| {
                    b.st(Space::Global, Ty::F32, Addr::Global(at, 0), &[lse[r]])
                });
            });
        }
    }
}

/// (query position, query head) of packed row `m0 + row` of the group whose first query
/// head is `head0`.
pub(super) fn packed_coords(
    b: &mut Builder,
    (m0, row): (Reg<B32>, Reg<B32>),
    (hpk, head0): (Reg<B32>, Reg<B32>),
) -> (Reg<B32>, Reg<B32>) {
    let pr = b.add_u32(m0, row);
    let pos = b.div_u32(pr, hpk);
    let g = b.rem_u32(pr, hpk);
    (pos, b.add_u32(head0, g))
}

/// Global byte address of `t[batch, pos, head, 0]`, from `t[batch, 0, 0, 0]` at `base`.
pub(super) fn row_addr_of(
    b: &mut Builder,
    p: &Params,
    t: &TensorArgs,
    base: Reg<B64>,
    pos: Reg<B32>,
    head: Reg<B32>,
) -> Reg<B64> {
    let off = b.mul_wide_u32(pos, p.row_stride(t));
    let off = b.mad_wide_u32(head, p.get(t.head_stride), off);
    let bytes = b.add_s64(off, off);
    b.add_s64(base, bytes)
}
