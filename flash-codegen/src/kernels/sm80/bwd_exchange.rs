//! Kernel layer: one query block of the backward main pass with FA2's warp layouts
//! ([`Sm80Layout::Exchange`](crate::spec::Sm80Layout::Exchange)).
//!
//! Warp w owns the 32 keys of row block `w % (block_n / 32)` (two m16 tiles) and column
//! group `g = w / (block_n / 32)`. For S^T = K Q^T and dP^T = V dO^T the group picks its
//! share of the query block; P^T and dS^T go to shared memory; after a barrier, for
//! dV += P^T dO and dK += dS^T Q the group picks its share of the head dim and reads P^T
//! and dS^T of the whole query block back as A fragments. Every B fragment read from
//! shared memory feeds both m-tiles.

use super::warp::{AOperand, Warp, by_m_tile};
use super::warp_store::Cols;
use crate::kernels::mask::{QueryEdges, QueryMask};
use crate::kernels::scores::{AlibiBias, ScoreGrad, ScoreRule};
use crate::kernels::softmax::lse_log2;
use crate::ptx::{Addr, B32, B64, Builder, F32, HalfFmt, LdCache, Reg, Space, Ty};
use crate::tile::acc::AccTile;
use crate::tile::smem::{ROW_BYTES, SmemTile};

/// The exchange layout of one kernel: the warp's column group and the P^T tile.
pub struct Exchange {
    /// Column groups (warps per 32-key row block).
    pub groups: u32,
    /// This warp's column group.
    pub group: Reg<B32>,
    /// P^T `[block_n][block_m]` (dS^T has its own tile, shared with the atomic dQ).
    pub pt_tile: SmemTile,
}

/// The tiles one query block reads: K, V (resident), Q and dO (this stage, at `st`), and
/// the P^T / dS^T exchange tiles.
pub struct StepTiles<'a> {
    /// K `[block_n][d]`.
    pub k: &'a SmemTile,
    /// V `[block_n][d]`.
    pub v: &'a SmemTile,
    /// Q `[block_m][d]` (stage-0 tile; the current stage sits at `st`).
    pub q: &'a SmemTile,
    /// dO `[block_m][d]` (stage-0 tile).
    pub d_o: &'a SmemTile,
    /// dS^T `[block_n][block_m]`.
    pub ds: &'a SmemTile,
    /// Shared address of the dynamic shared memory.
    pub smem: Reg<B32>,
    /// Shared address the current stage's Q and dO tiles are relative to.
    pub st: Reg<B32>,
}

/// Per-column statistics of the current query block, staged in shared memory by the
/// stream (zero past the sequence end: there Q and dO are zero too, so P = 1 is harmless).
/// Read at use, two columns (`8 nt + 2t`, `+1`) per 8-byte load, to keep them out of the
/// register budget.
pub struct ColStats {
    /// Shared address of `lse[m0 + 2t]` and of `D[m0 + 2t]`.
    lse: Reg<B32>,
    d: Reg<B32>,
}

impl ColStats {
    /// The thread's two columns of the vectors at shared addresses `lse_smem` and `d_smem`.
    pub fn new(b: &mut Builder, w: &Warp, lse_smem: Reg<B32>, d_smem: Reg<B32>) -> Self {
        let off = b.shl_b32(w.t2, 2u32);
        ColStats {
            lse: b.add_u32(lse_smem, off),
            d: b.add_u32(d_smem, off),
        }
    }

    fn pair(b: &mut Builder, base: Reg<B32>, nt: usize) -> [Reg<F32>; 2] {
        b.ld(
            Space::Shared,
            LdCache::Default,
            Ty::F32,
            Addr::Shared(base, 32 * nt as i32),
        )
    }

    /// `LSE * log2 e` of n-tile `nt`'s two columns; +inf for fully masked rows (-inf LSE).
    fn lse_log2(&self, b: &mut Builder, nt: usize) -> [Reg<F32>; 2] {
        Self::pair(b, self.lse, nt).map(|l| lse_log2(b, l))
    }

    fn d(&self, b: &mut Builder, nt: usize) -> [Reg<F32>; 2] {
        Self::pair(b, self.d, nt)
    }

    /// S^T -> P^T (the tile's registers replaced): `exp2(s * scale_log2 - LSE * log2 e)`, n-tile `nt` of `pt`
    /// being column n-tile `nt0 + nt`.
    pub fn probabilities(
        &self,
        b: &mut Builder,
        pt: &mut AccTile,
        nt0: usize,
        scale_log2: Reg<F32>,
    ) {
        let neg_lse2 = |b: &mut Builder, nt| self.lse_log2(b, nt0 + nt).map(|l| b.neg_f32(l));
        pt.map_by_col(b, neg_lse2, |b, at, x, neg| {
            let y = b.fma_f32(x, scale_log2, neg[at.pair]);
            b.ex2(y)
        });
    }

    /// dP^T -> dS^T (the tile's registers replaced): `P^T * (dP^T - D)`, times the score
    /// transform's derivative where `grad` says (a softcap: [`ScoreGrad`]); n-tile `nt` of
    /// `ds` being column n-tile `nt0 + nt` and n-tile `pt_nt0 + nt` of `pt`.
    pub fn ds(
        &self,
        b: &mut Builder,
        (pt, grad): (&AccTile, Option<&ScoreGrad>),
        ds: &mut AccTile,
        nt0: usize,
        pt_nt0: usize,
    ) {
        let p = pt.n_tiles_from(pt_nt0, ds.n_tiles());
        let Some(grad) = grad else {
            let d = |b: &mut Builder, nt| self.d(b, nt0 + nt);
            ds.zip_map_by_col(b, &p, d, |b, at, dp, p, d| {
                let diff = b.sub_f32(dp, d[at.pair]);
                b.mul_f32(p, diff)
            });
            return;
        };
        let stats = |b: &mut Builder, nt| (self.d(b, nt0 + nt), self.lse_log2(b, nt0 + nt));
        ds.zip_map_by_col(b, &p, stats, |b, at, dp, p, (d, lse)| {
            let diff = b.sub_f32(dp, d[at.pair]);
            let dt = grad.dtanh(b, p, lse[at.pair]);
            let diff = b.mul_f32(diff, dt);
            b.mul_f32(p, diff)
        });
    }
}

impl Exchange {
    /// Query columns of the block per group.
    pub fn q_cols(&self, block_m: u32) -> u32 {
        block_m / self.groups
    }

    /// One query block (first query `m0`): S^T, P^T, dP^T, dS^T for the group's query
    /// columns, both to shared memory, then dV and dK for the group's head-dim columns.
    /// `rule`: the score transform and the softmax's scale, and ALiBi's bias; `masked`:
    /// the mask and where it changes ([`QueryEdges`]);
    /// `after_scores` runs right after S^T (the late prefetch's place).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        w: &Warp,
        t: &StepTiles,
        stats: &ColStats,
        (rule, alibi): (&ScoreRule, Option<&AlibiBias>),
        masked: Option<(&QueryMask, QueryEdges)>,
        m0: Reg<B32>,
        (dv, dk): (&mut AccTile, &mut AccTile),
        after_scores: &mut dyn FnMut(&mut Builder),
    ) {
        let (bm, d) = (t.q.rows, dv.cols() * self.groups);
        let qn = self.q_cols(bm);
        let row_off = b.mul_lo_u32(self.group, qn * ROW_BYTES);
        let st_rows = b.add_u32(t.st, row_off);
        let chunk0 = b.mul_lo_u32(self.group, qn / 8);
        b.comment("-- P^T = exp2(K Q^T * scale_log2 - LSE * log2 e), the group's queries --");
        let mut pt = w.acc_zeros(b, qn);
        w.mma_a_bt(
            b,
            fmt,
            &mut pt,
            &AOperand::Smem(t.k, t.smem),
            (t.q, st_rows),
            d,
        );
        after_scores(b);
        rule.apply(b, &mut pt);
        // the group's first query column
        let m0c = |b: &mut Builder| b.mad_lo_u32(self.group, qn, m0);
        if let Some(a) = alibi {
            let c0 = m0c(b);
            a.apply(b, &mut pt, c0);
        }
        if let Some((qmask, edges)) = masked {
            let m0c = m0c(b);
            edges.mask(b, qmask, &mut pt, m0c, qn);
        }
        stats.probabilities(b, &mut pt, 0, rule.softmax_scale);
        w.store_tile(b, fmt, &pt, t.smem, &self.pt_tile, Cols::At(chunk0));
        // dP^T in one piece below 64 group columns: V's A fragments are read once and 8
        // accumulators overlap the mma latency (it fits 255 registers because the stream
        // plans its copies at issue, the causal mask keeps one register and dS^T stores
        // share one address per chunk); 64 or more (tile overrides only) in two halves
        let halves = if qn >= 64 { 2 } else { 1 };
        let half = qn / halves;
        for h in 0..halves {
            b.comment(format!(
                "-- dS^T = P^T * (V dO^T - D), columns {}.. of the group's --",
                h * half
            ));
            let mut ds = w.acc_zeros(b, half);
            let st_half = b.add_u32(st_rows, h * half * ROW_BYTES);
            w.mma_a_bt(
                b,
                fmt,
                &mut ds,
                &AOperand::Smem(t.v, t.smem),
                (t.d_o, st_half),
                d,
            );
            let nt0 = (h * half / 8) as usize;
            stats.ds(b, (&pt, rule.grad.as_ref()), &mut ds, nt0, nt0);
            let c = b.add_u32(chunk0, h * half / 8);
            w.store_tile(b, fmt, &ds, t.smem, t.ds, Cols::At(c));
        }
        b.bar_sync();
        b.comment("-- dV += P^T dO, dK += dS^T Q: the group's head-dim columns --");
        let panel_off = b.mul_lo_u32(self.group, (d / self.groups / 64) * bm * ROW_BYTES);
        let st_panel = b.add_u32(t.st, panel_off);
        for (src, acc, b_tile) in [(&self.pt_tile, dv, t.d_o), (t.ds, dk, t.q)] {
            let a = by_m_tile(w.load_a(b, (src, t.smem), bm));
            w.mma_a_b(b, fmt, acc, &a, (b_tile, st_panel), 0);
        }
    }

    /// First head-dim column of the warp's dV/dK (`group * d / groups`), the global
    /// address of that column in row 0 of a `[rows][row_stride]` tensor of
    /// `elem_bytes`-byte elements at `base`, and the head-dim columns left from there (0
    /// when past the end).
    pub fn cols_from(
        &self,
        b: &mut Builder,
        (d, elem_bytes): (u32, u32),
        base: Reg<B64>,
        head_dim: Reg<B32>,
    ) -> (Reg<B64>, Reg<B32>) {
        let c0 = b.mul_lo_u32(self.group, d / self.groups);
        let bytes = b.mul_wide_u32(c0, elem_bytes);
        let at = b.add_s64(base, bytes);
        let hd = b.max_u32(head_dim, c0);
        (at, b.sub_u32(hd, c0))
    }
}
