//! Kernel layer, sm_80 backward main pass: one query block without the exchange layout,
//! and the stores of dV and dK.

use super::{GroupSplit, KeyBlock, Sweep};
use crate::abi::{DK, DKV_PARTIAL, DV, SOFTMAX_SCALE};
use crate::kernels::scores::{AlibiBias, RowsOf, ScoreRule, TileRows};
use crate::kernels::sm80::bwd_exchange::{ColStats, StepTiles};
use crate::kernels::sm80::warp::AOperand;
use crate::kernels::sm80::warp_store::Cols;
use crate::ptx::{B32, B64, Builder, Cmp, Reg};
use crate::spec::{Mask, Scores};
use crate::tile::acc::AccTile;

impl KeyBlock<'_> {
    /// One query block without the exchange layout (first query `m0`), in query
    /// sub-blocks of 32 columns so that S^T and dP^T of one sub-block live at a time:
    ///   P^T = exp2(K Q^T * scale_log2 - LSE * log2 e);  dV += P^T dO
    ///   dS^T = P^T * (V dO^T - D);  dK += dS^T Q;  dS^T to shared memory for the dQ
    #[allow(clippy::too_many_arguments)]
    pub(super) fn streamed_block(
        &self,
        b: &mut Builder,
        sw: Sweep,
        tiles: &StepTiles,
        (stats, ds_cur): (&ColStats, Reg<B32>),
        [k_operand, v_operand]: &[AOperand; 2],
        (m0, head): (Reg<B32>, Reg<B32>),
        (dv, dk): (&mut AccTile, &mut AccTile),
    ) {
        let (w, fmt, st) = (&self.w, self.fmt, tiles.st);
        let (d, bm) = (self.plan.spec.head_dim, self.t.block_m);
        let sub = bm.min(32);
        let rule = ScoreRule::load(b, &self.p, self.plan.spec.scores, self.scale_log2);
        let alibi = self.alibi(b, head);
        for c0 in (0..bm).step_by(sub as usize) {
            let (q_sub, do_sub) = (tiles.q.rows_from(c0), tiles.d_o.rows_from(c0));
            let nt0 = (c0 / 8) as usize;
            b.comment(format!(
                "-- query columns {c0}..{}: P^T = exp2(K Q^T * scale_log2 - LSE * log2 e) --",
                c0 + sub
            ));
            let mut pt = w.acc_zeros(b, sub);
            w.mma_a_bt(b, fmt, &mut pt, k_operand, (&q_sub, st), d);
            rule.apply(b, &mut pt);
            if let Some(a) = &alibi {
                let m0c = b.add_u32(m0, c0);
                a.apply(b, &mut pt, m0c);
            }
            if self.plan.spec.mask != Mask::None {
                let m0c = b.add_u32(m0, c0);
                let edges = self.query_edges(b).expect("a masked kernel has edges");
                edges.mask(b, &self.qmask, &mut pt, m0c, sub);
            }
            stats.probabilities(b, &mut pt, nt0, rule.softmax_scale);
            if sw.dv {
                b.comment("-- dV += P^T dO --");
                let a = pt.as_a_all(b, fmt);
                w.mma_a_b(b, fmt, dv, &a, (&do_sub, st), 0);
            }
            // two m-tiles per warp (d64 on 128 keys): dS^T in 16-column halves, for the
            // registers (sm_80 spilled 32 bytes in one piece)
            let halves = if w.m_tiles >= 2 && sub >= 32 { 2 } else { 1 };
            let part = sub / halves;
            for h in (0..halves).filter(|_| sw.dk) {
                b.comment("-- dS^T = P^T * (V dO^T - D); dK += dS^T Q --");
                let c = c0 + h * part;
                let pt_nt0 = (h * part / 8) as usize;
                let mut ds = w.acc_zeros(b, part);
                let do_rows = (&tiles.d_o.rows_from(c), st);
                w.mma_a_bt(b, fmt, &mut ds, v_operand, do_rows, d);
                stats.ds(b, (&pt, rule.grad.as_ref()), &mut ds, nt0 + pt_nt0, pt_nt0);
                let a = ds.as_a_all(b, fmt);
                w.mma_a_b(b, fmt, dk, &a, (&tiles.q.rows_from(c), st), 0);
                let cols = Cols::Fixed(nt0 + pt_nt0);
                let ds_tile = tiles.ds;
                b.if_uniform(self.dq_on, |b| {
                    w.store_tile(b, fmt, &ds, ds_cur, ds_tile, cols)
                });
            }
        }
    }

    /// ALiBi's bias on the warp's key rows for query head `head` (none for other
    /// scores), loaded where a block needs it rather than kept through the loops.
    pub(super) fn alibi(&self, b: &mut Builder, head: Reg<B32>) -> Option<AlibiBias> {
        if self.plan.spec.scores != Scores::Alibi {
            return None;
        }
        let n_block = Self::work_key_block(b);
        let n0 = b.mul_lo_u32(n_block, self.t.block_n);
        let rows = TileRows {
            base: n0,
            row0: self.w.rows[0],
            t2: self.w.t2,
            of: RowsOf::Keys,
        };
        let lengths = (self.seqlen_q, self.seqlen_k);
        let (batch, scale_log2) = (self.batch, self.scale_log2);
        AlibiBias::load(
            b,
            &self.p,
            &self.plan.spec,
            (batch, head),
            scale_log2,
            rows,
            lengths,
        )
    }

    /// The sweep's stores: dV, and dK scaled by softmax_scale (exchange: the warp's
    /// share of the head dim's columns); with more than one group split, as the split's
    /// f32 partials ([`KeyBlock::store_partials`]).
    pub(super) fn store(&self, b: &mut Builder, sw: Sweep, dv: &AccTile, dk: &AccTile) {
        let (p, w, fmt) = (&self.p, &self.w, self.fmt);
        let (d, bn) = (self.plan.spec.head_dim, self.t.block_n);
        // the key block's ids and rows re-read here rather than kept live through the
        // loops (d128 on 128 keys: 12 spill bytes for sm_80 otherwise)
        let n_block = Self::work_key_block(b);
        let (kv_head, split) = Self::group_split(b, self.plan, p);
        let batch = Self::work_batch(b);
        let n0 = b.mul_lo_u32(n_block, bn);
        let k_rows = b.sub_u32(self.seqlen_k, n0);
        // dV, then dK scaled by softmax_scale, to dv and dk
        let direct = |b: &mut Builder| {
            if sw.dv {
                let base = p.tensor(b, &DV, batch, n0, kv_head);
                let (base, hd) = self.cols(b, (d, 2), base);
                w.store_rows(b, fmt, dv, base, p.row_stride(&DV), hd, k_rows);
            }
            if sw.dk {
                let mut dk = dk.clone();
                dk.scale(b, p.get(SOFTMAX_SCALE));
                let base = p.tensor(b, &DK, batch, n0, kv_head);
                let (base, hd) = self.cols(b, (d, 2), base);
                w.store_rows(b, fmt, &dk, base, p.row_stride(&DK), hd, k_rows);
            }
        };
        let Some(split) = split else {
            return direct(b);
        };
        let one = b.setp_u32(Cmp::Eq, split.count, 1u32);
        let at = (batch, n0, kv_head, k_rows);
        b.if_else_uniform(one, direct, |b| {
            self.store_partials(b, sw, (dv, dk), at, split)
        });
    }

    /// The exchange layout's head-dim columns of the warp (from `group * d / groups`)
    /// in a tensor of `elem_bytes`-byte elements at `base`; all of them otherwise.
    fn cols(&self, b: &mut Builder, d: (u32, u32), base: Reg<B64>) -> (Reg<B64>, Reg<B32>) {
        match &self.exchange {
            Some(x) => x.cols_from(b, d, base, self.head_dim),
            None => (base, self.head_dim),
        }
    }

    /// The split's dK (scaled) and dV as f32 partials: tensor `2 split + (0: dK, 1: dV)`
    /// of [`crate::abi::DKV_PARTIAL`], each `[batch, seqlen_k, heads_k, head_dim]`.
    fn store_partials(
        &self,
        b: &mut Builder,
        sw: Sweep,
        (dv, dk): (&AccTile, &AccTile),
        (batch, n0, kv_head, k_rows): (Reg<B32>, Reg<B32>, Reg<B32>, Reg<B32>),
        split: GroupSplit,
    ) {
        let (p, w, d) = (&self.p, &self.w, self.plan.spec.head_dim);
        b.comment("-- the split's f32 partial dK (scaled) and dV --");
        let mut dk = dk.clone();
        if sw.dk {
            dk.scale(b, p.get(SOFTMAX_SCALE));
        }
        let heads_k = Self::work_kv_slots(b);
        let heads_k = b.shr_u32(heads_k, split.shift);
        let batches = Self::work_batches(b);
        let row_floats = b.mul_lo_u32(heads_k, self.head_dim);
        let row_bytes = b.shl_b32(row_floats, 2u32);
        let row_floats64 = b.cvt_u64_u32(row_floats);
        let tensor_rows = b.mul_wide_u32(batches, self.seqlen_k);
        let n0_64 = b.cvt_u64_u32(n0);
        let row0 = b.mad_wide_u32(batch, self.seqlen_k, n0_64);
        let col0 = b.mul_wide_u32(kv_head, self.head_dim);
        let partial = b.cvta_global(p.get(DKV_PARTIAL));
        for (which, on, acc) in [(0u32, sw.dk, &dk), (1, sw.dv, dv)] {
            if !on {
                continue;
            }
            let t = b.mad_lo_u32(split.index, 2u32, which);
            let t = b.cvt_u64_u32(t);
            let row = b.mul_lo_u64(t, tensor_rows);
            let row = b.add_s64(row, row0);
            let elem = b.mul_lo_u64(row, row_floats64);
            let elem = b.add_s64(elem, col0);
            let bytes = b.shl_b64(elem, 2);
            let base = b.add_s64(partial, bytes);
            let (base, cols) = self.cols(b, (d, 4), base);
            w.store_rows_f32(b, acc, (base, row_bytes), cols, k_rows);
        }
    }
}
