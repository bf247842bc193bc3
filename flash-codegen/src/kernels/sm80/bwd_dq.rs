//! Kernel layer: deterministic dQ (FA2 backward, dQ half), parallel over query blocks.
//!
//! One CTA per (query block, head, batch) walks the key blocks in order and keeps dQ in
//! registers, so no atomics and no scratch: bitwise reproducible. Per key block:
//! S = Q K^T, P = exp2(S * scale_log2 - LSE * log2 e) (recomputed from the saved LSE),
//! dP = dO V^T, dS = P * (dP - D), dQ += dS K. At the end dQ *= softmax_scale. Under a
//! sliding window it walks only the key blocks the window reaches, as the forward.

use super::mainloop::{Opening, QBlock, open};
use super::stream::{BlockStream, CopyPlan};
use crate::abi::{DO, DQ, DVEC, HEAD_DIM, HEADS, K, LSE, Q, SCALE_LOG2, SOFTMAX_SCALE, V};
use crate::kernels::half_fmt;
use crate::kernels::mask::{KeyRule, mask_block};
use crate::kernels::params::Params;
use crate::kernels::schedule::{kv_blocks, window_blocks};
use crate::kernels::scores::{AlibiBias, RowsOf, ScoreGrad, ScoreRule, TileRows};
use crate::kernels::softmax::{NEG_INF, lse_log2};
use crate::ptx::{Addr, Builder, Cmp, Entry, F32, LaunchBounds, LdCache, Reg, Space, Ty};
use crate::spec::{KernelPlan, Pass};
use crate::tile::acc::AccTile;
use crate::tile::copy::TileCopy;
use crate::tile::smem::SmemTile;

/// Per-row statistics of the thread's rows: `LSE * log2 e` (+inf for fully masked rows
/// and rows past the end, so that P = 0 there) and D.
pub struct RowStats {
    /// `LSE * log2 e` per thread row (+inf where P must be 0).
    pub lse_log2: Vec<Reg<F32>>,
    /// D = rowsum(dO * O) per thread row.
    pub d: Vec<Reg<F32>>,
}

impl RowStats {
    /// Loads the statistics of the thread's rows (rows past the end read as masked).
    pub fn load(b: &mut Builder, p: &Params, q: &QBlock) -> Self {
        let heads = p.get(HEADS);
        let lse_base = q.row_stats(b, p, LSE, heads);
        let d_base = q.row_stats(b, p, DVEC, heads);
        let mut stats = RowStats {
            lse_log2: vec![],
            d: vec![],
        };
        for &row in &q.rows {
            let ok = b.setp_s32(Cmp::Lt, row, q.q_rows);
            let lse = b.mov(NEG_INF);
            let d = b.mov(0.0f32);
            let la = b.mad_wide_u32(row, 4u32, lse_base);
            let da = b.mad_wide_u32(row, 4u32, d_base);
            b.when(ok, false, |b| {
                b.ld_into(
                    Space::Global,
                    LdCache::NonCoherent,
                    Ty::F32,
                    Addr::Global(la, 0),
                    &[lse],
                );
                b.ld_into(
                    Space::Global,
                    LdCache::NonCoherent,
                    Ty::F32,
                    Addr::Global(da, 0),
                    &[d],
                );
            });
            stats.lse_log2.push(lse_log2(b, lse));
            stats.d.push(d);
        }
        stats
    }

    /// P = exp2(S * scale_log2 - LSE * log2 e), in place of the scores.
    pub fn probabilities(&self, b: &mut Builder, s: &mut AccTile, scale_log2: Reg<F32>) {
        s.map(b, |b, at, x| {
            let neg = b.neg_f32(self.lse_log2[at.row]);
            let y = b.fma_f32(x, scale_log2, neg);
            b.ex2(y)
        });
    }

    /// dS = P * (dP - D), in place of dP, times the score transform's derivative where
    /// `grad` says (a softcap: [`ScoreGrad`]).
    pub fn ds(&self, b: &mut Builder, (p, grad): (&AccTile, Option<&ScoreGrad>), dp: &mut AccTile) {
        dp.zip_map(b, p, |b, at, dp, p| {
            let diff = b.sub_f32(dp, self.d[at.row]);
            let diff = match grad {
                Some(g) => {
                    let dt = g.dtanh(b, p, self.lse_log2[at.row]);
                    b.mul_f32(diff, dt)
                }
                None => diff,
            };
            b.mul_f32(p, diff)
        });
    }
}

/// The entry of a [`Pass::BwdDq`] spec.
pub fn build(plan: &KernelPlan) -> Entry {
    let spec = &plan.spec;
    assert_eq!(spec.pass.tile_pass(), Pass::BwdDq);
    let t = plan.tiles.sm80();
    let d = spec.head_dim;
    let fmt = half_fmt(spec.dtype);
    let header = format!(
        "{}: block {}x{}, {} warps, smem {} bytes",
        spec.name(),
        t.block_m,
        t.block_n,
        t.warps,
        plan.smem.bytes
    );
    let Opening { mut b, p, q, zero } = open(plan, header);
    let (seqlen_q, seqlen_k, head_dim) = (p.seqlen_q(&mut b), p.seqlen_k(&mut b), p.get(HEAD_DIM));
    let scale_log2 = p.get(SCALE_LOG2);
    let q_base = p.tensor(&mut b, &Q, q.batch, q.m0, q.head);
    let do_base = p.tensor(&mut b, &DO, q.batch, q.m0, q.head);
    let k_base = p.tensor(&mut b, &K, q.batch, zero, q.kv_head);
    let v_base = p.tensor(&mut b, &V, q.batch, zero, q.kv_head);
    let keys = KeyRule::load(&mut b, &p, spec.mask, (seqlen_q, seqlen_k));
    let (first, n_blocks, diag) = match keys.window() {
        Some(w) => window_blocks(&mut b, plan, w, (seqlen_q, seqlen_k), q.m0),
        None => {
            let (n, diag) = kv_blocks(&mut b, plan, seqlen_q, seqlen_k, q.m0);
            (zero, n, diag)
        }
    };

    b.comment("-- shared memory: Q, dO, then `stages` K tiles and `stages` V tiles --");
    let smem = b.smem_base();
    let [q_tile, do_tile] = [0, 1].map(|i| SmemTile::from(plan.smem.fixed[i]));
    let kv = BlockStream::new(&mut b, plan, &p, (q.tid, CopyPlan::Once), [&K, &V]);
    for (tile, base, x) in [(&q_tile, q_base, &Q), (&do_tile, do_base, &DO)] {
        let stride = p.row_stride(x);
        let copy = TileCopy::new(&mut b, tile, d, t.threads(), q.tid, stride, head_dim);
        copy.issue(&mut b, smem, tile.base, base, q.q_rows);
    }
    if t.layout.resident() {
        b.cp_async_commit(); // Q and dO land first, then their fragments move to registers
    }
    kv.start(&mut b, smem, [k_base, v_base], first, seqlen_k, n_blocks);
    b.cp_async_commit();
    let [q_operand, do_operand] =
        q.a_operands(&mut b, t.layout.resident(), [&q_tile, &do_tile], smem, d);
    let mask = q.mask(&mut b, keys, seqlen_q, seqlen_k);
    let stats = RowStats::load(&mut b, &p, &q);
    let rows = TileRows {
        base: q.m0,
        row0: q.rows[0],
        t2: q.t2,
        of: RowsOf::Queries,
    };
    let lengths = (seqlen_q, seqlen_k);
    let alibi = AlibiBias::load(
        &mut b,
        &p,
        spec,
        (q.batch, q.head),
        scale_log2,
        rows,
        lengths,
    );
    let mut dq = q.acc_zeros(&mut b, d);

    let (n0, kv_smem, lp) = kv.begin(&mut b, smem, seqlen_k, (first, n_blocks));
    b.comment("-- P = exp2(Q K^T * scale_log2 - LSE * log2 e) --");
    let mut s = q.acc_zeros(&mut b, t.block_n);
    q.mma_a_bt(&mut b, fmt, &mut s, &q_operand, (&kv.tiles[0], kv_smem), d);
    let rule = ScoreRule::load(&mut b, &p, spec.scores, scale_log2);
    rule.apply(&mut b, &mut s);
    if let Some(a) = &alibi {
        a.apply(&mut b, &mut s, n0);
    }
    mask_block(
        &mut b,
        plan,
        (&mask, keys),
        &mut s,
        (n0, n0),
        seqlen_k,
        diag,
    );
    stats.probabilities(&mut b, &mut s, rule.softmax_scale);
    b.comment("-- dS = P * (dO V^T - D) --");
    let mut dpt = q.acc_zeros(&mut b, t.block_n);
    q.mma_a_bt(
        &mut b,
        fmt,
        &mut dpt,
        &do_operand,
        (&kv.tiles[1], kv_smem),
        d,
    );
    stats.ds(&mut b, (&s, rule.grad.as_ref()), &mut dpt);
    b.comment("-- dQ += dS K --");
    let a = dpt.as_a_all(&mut b, fmt);
    q.mma_a_b(&mut b, fmt, &mut dq, &a, (&kv.tiles[0], kv_smem), 0);
    kv.end(&mut b, lp);

    b.comment("-- epilogue: dQ *= softmax_scale, write dQ --");
    let scale = p.get(SOFTMAX_SCALE);
    dq.scale(&mut b, scale);
    let dq_base = p.tensor(&mut b, &DQ, q.batch, q.m0, q.head);
    q.store_rows(
        &mut b,
        fmt,
        &dq,
        dq_base,
        p.row_stride(&DQ),
        head_dim,
        q.q_rows,
    );
    // (varlen: without a CTA floor, ptxas for sm_90 caps the d192 kernel at 168 registers
    // and spills 12 bytes; `.minnctapersm 1` lets it take the 214 it needs)
    let bounds = LaunchBounds {
        max_threads: Some(t.threads()),
        min_ctas_per_sm: spec.pass.is_varlen().then_some(1),
        exact_threads: false,
    };
    b.finish(spec.name(), p.entry(), bounds)
}
