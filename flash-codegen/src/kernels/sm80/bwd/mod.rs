//! Kernel layer: FlashAttention-2 backward, main pass (Dao 2023, Algorithm 2), parallel
//! over key blocks.
//!
//! One CTA per (key block, kv head, batch); each warp owns 16 keys per m-tile (with the
//! exchange layout, [`Sm80Layout::Exchange`](crate::spec::Sm80Layout::Exchange): 32 keys,
//! see `bwd_exchange`). Scores are computed transposed, S^T = K Q^T (rows = keys), so P^T and dS^T come out of the accumulators
//! already in the A-operand layout of dV += P^T dO and dK += dS^T Q. For every query
//! head of the kv head's group, in a fixed order, and every query block from the last
//! down to the causal diagonal (under a sliding window: the blocks its window reaches),
//! as FA2 runs them (Q and dO streamed through shared memory):
//!   P^T = exp2(S^T * scale_log2 - LSE * log2 e)        (recomputed from the saved LSE)
//!   dV += P^T dO;  dP^T = V dO^T;  dS^T = P^T * (dP^T - D);  dK += dS^T Q
//!   dQ += dS K: dS^T goes through shared memory and every warp adds its query rows
//!   into the f32 accumulator with red.global.add.f32 (skipped when dq_accum is null:
//!   the deterministic mode computes dQ in its own pass). dS^T alternates between two
//!   tiles and each block's dQ runs in the next iteration, after the one barrier per
//!   block (exchange: right after the step's own barrier), so no barrier waits for it.
//! dK is scaled by softmax_scale at the end. With two sweeps (large head dims) the first
//! computes dV only and the second dK and dQ, so one accumulator lives at a time.
//!
//! Phases: `KeyBlock::open` (parameters, the CTA's key block, its shared-memory tiles,
//! K and V issued, the query blocks that see it), then per sweep `KeyBlock::sweep`: for
//! each query head of the group `KeyBlock::head` runs the query-block loop (one
//! `KeyBlock::streamed_block` or exchange step per block, the atomic dQ deferred to
//! the next iteration), and `KeyBlock::store` writes dV and dK.

use super::bwd_atomic_dq::DqWarp;
use super::bwd_exchange::{ColStats, Exchange, StepTiles};
use super::stream::BlockStream;
use super::warp::Warp;
use crate::abi::{DO, DVEC, LSE, Q};
use crate::kernels::mask::QueryMask;
use crate::kernels::params::{Params, row_stats_base};
use crate::kernels::scores::ScoreRule;
use crate::ptx::{B32, Builder, Cmp, Entry, F32, HalfFmt, LaunchBounds, Pred, Reg};
use crate::spec::{KernelPlan, Pass, Sm80Tiles};
use crate::tile::acc::AccTile;
use crate::tile::smem::SmemTile;

/// The entry of a [`Pass::Bwd`] spec.
pub fn build(plan: &KernelPlan) -> Entry {
    assert_eq!(plan.spec.pass.tile_pass(), Pass::Bwd);
    let mut b = Builder::new();
    let kb = KeyBlock::open(&mut b, plan);
    for sweep in Sweep::all(kb.t.sweeps) {
        kb.sweep(&mut b, sweep);
    }
    // (varlen: without a CTA floor ptxas caps d32 at 128 registers and spills)
    let bounds = LaunchBounds {
        max_threads: Some(kb.t.threads()),
        min_ctas_per_sm: plan.spec.pass.is_varlen().then_some(1),
        exact_threads: false,
    };
    b.finish(plan.spec.name(), kb.p.entry(), bounds)
}

/// What one pass over the query blocks computes: with two sweeps (large head dims) the
/// first computes dV only and the second dK and dQ, so one accumulator lives at a time.
#[derive(Clone, Copy)]
struct Sweep {
    index: u32,
    dv: bool,
    dk: bool,
}

impl Sweep {
    fn all(sweeps: u32) -> impl Iterator<Item = Sweep> {
        (0..sweeps).map(move |index| Sweep {
            index,
            dv: sweeps == 1 || index == 0,
            dk: sweeps == 1 || index == 1,
        })
    }

    fn what(&self) -> &'static str {
        match (self.dv, self.dk) {
            (true, true) => "dV, dK, dQ",
            (true, false) => "dV",
            _ => "dK, dQ",
        }
    }
}

/// The CTA's key block and everything its phases share.
struct KeyBlock<'a> {
    plan: &'a KernelPlan,
    t: Sm80Tiles,
    fmt: HalfFmt,
    p: Params,
    w: Warp,
    /// Parameters read in every phase (varlen: the sequence's lengths).
    seqlen_q: Reg<B32>,
    seqlen_k: Reg<B32>,
    head_dim: Reg<B32>,
    group: Reg<B32>,
    scale_log2: Reg<F32>,
    /// The CTA's kv head (without group splits: `%ctaid.y`), batch, and the query heads in
    /// all.
    kv_head: Reg<B32>,
    batch: Reg<B32>,
    heads: Reg<B32>,
    zero: Reg<B32>,
    smem: Reg<B32>,
    k_tile: SmemTile,
    v_tile: SmemTile,
    /// dS^T (of this query block; without exchange, the next block's sits one tile on).
    ds_tile: SmemTile,
    qs: BlockStream,
    exchange: Option<Exchange>,
    /// The query blocks that see the key block: `m_first..n_qblocks`.
    n_qblocks: Reg<B32>,
    m_first: Reg<B32>,
    qmask: QueryMask,
    /// dq_accum is given (atomic mode).
    dq_on: Reg<Pred>,
    /// The warp's share of the atomic dQ, computed once (without exchange).
    dq_warp: Option<DqWarp>,
}

mod block;
mod open;
mod work;

/// Which of a group's query heads the CTA takes: `index`, `index + count`, ... (the dense
/// pass, [`crate::abi::GROUP_SPLIT_SHIFT`]): the CTA's `%ctaid.y` is `kv_head * count +
/// index`; with more than one split the sweep stores f32 partials for [`Pass::BwdKvSum`]
/// to add. A varlen pass has none: one CTA per (key block, kv head) runs the group.
#[derive(Clone, Copy)]
struct GroupSplit {
    index: Reg<B32>,
    count: Reg<B32>,
    /// log2 of `count`.
    shift: Reg<B32>,
}

impl KeyBlock<'_> {
    /// One sweep: the accumulators, the split's query heads of the group (in order), then
    /// the stores.
    fn sweep(&self, b: &mut Builder, sw: Sweep) {
        let d = self.plan.spec.head_dim;
        b.comment(format!("== sweep {}: {} ==", sw.index, sw.what()));
        // exchange: each warp accumulates its group's share of the head dim
        let acc_cols = self.exchange.as_ref().map_or(d, |x| d / x.groups);
        let mut dv = self.w.acc_zeros(b, if sw.dv { acc_cols } else { 0 });
        let mut dk = self.w.acc_zeros(b, if sw.dk { acc_cols } else { 0 });
        // (a pass without group splits reads no ids here: its kernels stay as they were)
        let split = match Self::splits_group(self.plan) {
            true => Self::group_split(b, self.plan, &self.p),
            false => (self.kv_head, None),
        };
        match split {
            (_, None) => {
                // every head of the group
                let gh = b.mov(0u32);
                let lp = b.loop_start();
                let more = b.setp_u32(Cmp::Lt, gh, self.group);
                b.loop_exit_unless(&lp, more);
                let head = b.mad_lo_u32(self.kv_head, self.group, gh);
                self.head(b, sw, head, (&mut dv, &mut dk));
                let ngh = b.add_u32(gh, 1u32);
                b.assign(gh, ngh);
                b.loop_end(lp);
            }
            (kv_head, Some(split)) => {
                // the split's heads: kv_head * group + split, then every count-th (the
                // CTA's ids re-read here rather than kept live through the sweeps)
                let first = b.mad_lo_u32(kv_head, self.group, split.index);
                let end = b.mad_lo_u32(kv_head, self.group, self.group);
                let head = b.mov(first);
                let lp = b.loop_start();
                let more = b.setp_u32(Cmp::Lt, head, end);
                b.loop_exit_unless(&lp, more);
                self.head(b, sw, head, (&mut dv, &mut dk));
                let next = b.add_u32(head, split.count);
                b.assign(head, next);
                b.loop_end(lp);
            }
        }
        self.store(b, sw, &dv, &dk);
    }

    /// Query head `head`: its Q and dO streamed, the query blocks from the last down to
    /// `m_first`, each one's dQ (atomic mode) deferred to the next iteration.
    fn head(
        &self,
        b: &mut Builder,
        sw: Sweep,
        head: Reg<B32>,
        (dv, dk): (&mut AccTile, &mut AccTile),
    ) {
        let (p, qs, smem, zero) = (&self.p, &self.qs, self.smem, self.zero);
        let (d, bm) = (self.plan.spec.head_dim, self.t.block_m);
        let range = (self.m_first, self.n_qblocks);
        let q_base = p.tensor(b, &Q, self.batch, zero, head);
        let do_base = p.tensor(b, &DO, self.batch, zero, head);
        let lse = row_stats_base(b, p, LSE, self.heads, self.batch, head, zero);
        let dvec = row_stats_base(b, p, DVEC, self.heads, self.batch, head, zero);
        qs.start_vectors(b, &[lse, dvec]);
        qs.start(
            b,
            smem,
            [q_base, do_base],
            self.m_first,
            self.seqlen_q,
            self.n_qblocks,
        );
        b.cp_async_commit();
        // K and V (first head: in the group before Q's) have landed once this waits
        let resident = self.t.layout.resident();
        let operands = self
            .w
            .a_operands(b, resident, [&self.k_tile, &self.v_tile], smem, d);
        // query blocks run downward, from the last to m_first
        let (m0, st, lp) = qs.begin(b, smem, self.seqlen_q, range);
        let j = qs.block();
        let deferred = sw.dk && self.exchange.is_none();
        if deferred {
            // the block before this one in the stream's order: j + 1
            let prev = b.add_u32(j, 1u32);
            let has_prev = b.setp_u32(Cmp::Lt, prev, self.n_qblocks);
            let m0_prev = b.add_u32(m0, bm);
            self.deferred_dq(b, has_prev, (prev, m0_prev), head, "previous");
        }
        let [q_tile, do_tile] = qs.tiles;
        let (lse_smem, d_smem) = (qs.vector_addr(b, smem, 0), qs.vector_addr(b, smem, 1));
        let tiles = StepTiles {
            k: &self.k_tile,
            v: &self.v_tile,
            q: &q_tile,
            d_o: &do_tile,
            ds: &self.ds_tile,
            smem,
            st,
        };
        match &self.exchange {
            Some(x) => {
                // the group's query columns of the LSE and D vectors
                let off = b.mul_lo_u32(x.group, 4 * x.q_cols(bm));
                let (ls, ds) = (b.add_u32(lse_smem, off), b.add_u32(d_smem, off));
                let stats = ColStats::new(b, &self.w, ls, ds);
                let masked = self.query_edges(b).map(|e| (&self.qmask, e));
                let mut prefetch = |b: &mut Builder| qs.prefetch(b, smem, self.seqlen_q, range);
                let (fmt, w) = (self.fmt, &self.w);
                let rule = ScoreRule::load(b, &self.p, self.plan.spec.scores, self.scale_log2);
                let alibi = self.alibi(b, head);
                x.step(
                    b,
                    fmt,
                    w,
                    &tiles,
                    &stats,
                    (&rule, alibi.as_ref()),
                    masked,
                    m0,
                    (dv, dk),
                    &mut prefetch,
                );
            }
            None => {
                let stats = ColStats::new(b, &self.w, lse_smem, d_smem);
                let ds_cur = if deferred { self.ds_stage(b, j) } else { smem };
                let at = (m0, head);
                self.streamed_block(b, sw, &tiles, (&stats, ds_cur), &operands, at, (dv, dk));
            }
        }
        if sw.dk && self.exchange.is_some() {
            // dS^T is complete since the step's barrier
            let (p, w) = (&self.p, &self.w);
            self.atomic_dq()
                .emit_if(b, self.plan, p, w, self.dq_on, smem, (head, m0));
        }
        qs.end(b, lp);
        // every warp is done with the stages (the next head restarts the stream) and the
        // last block's dS^T is complete
        b.bar_sync();
        if deferred {
            // the stream's last block: m_first
            let any = b.setp_u32(Cmp::Lt, self.m_first, self.n_qblocks);
            let m0_first = b.mul_lo_u32(self.m_first, bm);
            self.deferred_dq(b, any, (self.m_first, m0_first), head, "last");
        }
    }
}
