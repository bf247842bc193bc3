//! Kernel layer, sm_80 backward main pass: the kernel's opening ([`KeyBlock::open`]) and
//! the helpers its phases share (the atomic dQ, the causal bound, the dS^T stages).

use super::{GroupSplit, KeyBlock};
use crate::abi::{
    self, DO, DQ_ACCUM, GROUP_SPLIT_SHIFT, HEAD_DIM, HEADS, HEADS_PER_KV, K, Q, SCALE_LOG2, V,
};
use crate::kernels::half_fmt;
use crate::kernels::mask::{KeyRule, QueryEdges, QueryMask};
use crate::kernels::params::Params;
use crate::kernels::sm80::bwd_atomic_dq::{AtomicDq, dq_warp};
use crate::kernels::sm80::bwd_exchange::Exchange;
use crate::kernels::sm80::stream::{BlockStream, CopyPlan};
use crate::kernels::sm80::warp::Warp;
use crate::kernels::varlen::Packed;
use crate::ptx::{B32, Builder, Cmp, Pred, Reg};
use crate::spec::KernelPlan;
use crate::tile::copy::TileCopy;
use crate::tile::smem::SmemTile;

impl<'a> KeyBlock<'a> {
    /// The kernel's opening: parameters, the warp's keys, the CTA's key block, its shared
    /// memory, K and V issued, the range of query blocks and the causal mask.
    pub(super) fn open(b: &mut Builder, plan: &'a KernelPlan) -> Self {
        let spec = &plan.spec;
        let t = *plan.tiles.sm80();
        let (d, bm, bn) = (spec.head_dim, t.block_m, t.block_n);
        b.comment(format!(
            "{}: {bn} keys x {bm} queries, {} warps, {} sweeps, smem {} bytes",
            spec.name(),
            t.warps,
            t.sweeps,
            plan.smem.bytes
        ));
        let p = Params::load_spec(b, spec);
        let (seqlen_q, seqlen_k, head_dim) = (p.seqlen_q(b), p.seqlen_k(b), p.get(HEAD_DIM));
        let (group, scale_log2) = (p.get(HEADS_PER_KV), p.get(SCALE_LOG2));
        // every warp owns bn / warps keys (m16 tiles); exchange: 32 keys (two m-tiles) per
        // warp, the warps repeating over bn / 32 row blocks
        let w = if t.layout.exchange() {
            Warp::with_row_blocks(b, 2, Some(bn / 32))
        } else {
            Warp::new(b, (bn / t.warps / 16) as usize)
        };
        let n_block = Self::work_key_block(b);
        let (kv_head, _) = Self::group_split(b, plan, &p);
        let batch = Self::work_batch(b);
        // (a parameter where the pass has it: a quotient would stay live in a register)
        let heads = match Self::splits_group(plan) {
            true => p.get(HEADS),
            false => {
                let heads_k = Self::work_kv_slots(b);
                b.mul_lo_u32(heads_k, group)
            }
        };
        let n0 = b.mul_lo_u32(n_block, bn);
        if p.packed().is_some() {
            Packed::exit_past(b, n0, seqlen_k);
        }
        let k_rows = b.sub_u32(seqlen_k, n0);
        let zero = b.mov(0u32);

        b.comment("-- shared memory: K, V (resident), Q and dO stages, dS^T --");
        let smem = b.smem_base();
        let [k_tile, v_tile] = [0, 1].map(|i| SmemTile::from(plan.smem.fixed[i]));
        // copies planned at each issue free registers for two m-tiles per warp (the
        // exchange layouts, d64 on 128 keys; d128: the one-piece dP^T); with one m-tile
        // there are registers to spare and the extra instructions only cost time
        let copies = match w.m_tiles >= 2 {
            true => CopyPlan::AtIssue,
            false => CopyPlan::Once,
        };
        let qs = BlockStream::new(b, plan, &p, (w.tid, copies), [&Q, &DO])
            .with_vectors(b, 2)
            .downward();
        // (late: the next block's copies go out after the step's S^T, not right behind the
        // previous block's dQ atomics)
        let qs = match t.layout.late_prefetch() {
            true => qs.late_prefetch(),
            false => qs,
        };
        // dS^T, then a second tile: P^T (exchange) or the next query block's dS^T
        let [ds_tile, second] = [0, 1].map(|i| SmemTile::from(plan.smem.exchange[i]));
        let exchange = t.layout.exchange().then(|| Exchange {
            groups: t.warps / (bn / 32),
            group: b.div_u32(w.warp, bn / 32),
            pt_tile: second,
        });
        for (tile, x) in [(&k_tile, &K), (&v_tile, &V)] {
            let base = p.tensor(b, x, batch, n0, kv_head);
            let stride = p.row_stride(x);
            let copy = TileCopy::new(b, tile, d, t.threads(), w.tid, stride, head_dim);
            copy.issue(b, smem, tile.base, base, k_rows);
        }
        if t.layout.resident() {
            b.cp_async_commit();
        }

        let rule = KeyRule::load(b, &p, spec.mask, (seqlen_q, seqlen_k));
        b.comment(match rule {
            KeyRule::Local(_) => {
                "-- query blocks that see this key block: those its window reaches --"
            }
            _ => "-- query blocks that see this key block: from the causal diagonal on --",
        });
        let n_qblocks = b.add_u32(seqlen_q, bm - 1);
        let n_qblocks = b.div_u32(n_qblocks, bm);
        let shift = b.sub_s32(seqlen_k, seqlen_q);
        let first_q = b.sub_s32(n0, shift); // first query that sees key n0
        let (m_first, n_qblocks) = match rule {
            KeyRule::Local(w) => {
                // queries first_q - right ..= first_q + bn - 1 + left see the block's keys
                let lo = b.sub_s32(first_q, w.right);
                let lo = b.max_s32(lo, 0i32);
                let hi = b.add_s32(first_q, w.left);
                let hi = b.add_s32(hi, (bn + bm - 1) as i32);
                let hi = b.max_s32(hi, 0i32);
                let hi = b.div_u32(hi, bm);
                let end = b.min_u32(hi, n_qblocks);
                let first = b.div_u32(lo, bm);
                (b.min_u32(first, end), end)
            }
            KeyRule::Causal => {
                let f = b.max_s32(first_q, 0i32);
                (b.div_u32(f, bm), n_qblocks)
            }
            KeyRule::All => (zero, n_qblocks),
        };
        let key0 = b.add_u32(w.rows[0], n0);
        let qmask = match rule {
            KeyRule::Local(win) => QueryMask::window(b, (key0, w.t2), (seqlen_q, seqlen_k), win),
            _ => QueryMask::new(b, key0, w.t2, seqlen_q, seqlen_k),
        };
        let dq_on = b.setp_u64(Cmp::Ne, p.get(DQ_ACCUM), 0i64);
        // (exchange: computed where used, to keep registers for the accumulators)
        let dq_warp = (!t.layout.exchange()).then(|| dq_warp(b, plan, &w));
        KeyBlock {
            plan,
            t,
            fmt: half_fmt(spec.dtype),
            p,
            w,
            seqlen_q,
            seqlen_k,
            head_dim,
            group,
            scale_log2,
            kv_head,
            batch,
            heads,
            zero,
            smem,
            k_tile,
            v_tile,
            ds_tile,
            qs,
            exchange,
            n_qblocks,
            m_first,
            qmask,
            dq_on,
            dq_warp,
        }
    }

    /// The CTA's kv head and its [`GroupSplit`]: `%ctaid.y = kv_head * count + split`,
    /// `count = 1 << group_split_shift`, where the pass has the parameter, else
    /// `%ctaid.y` and one split. Called again where needed rather than kept live: shifts
    /// of `%ctaid.y` by a parameter, which ptxas recomputes where a quotient would hold a
    /// register through the loops (a division by the count spilled 8-24 bytes in the
    /// d64 and d96 rows).
    pub(super) fn group_split(
        b: &mut Builder,
        plan: &KernelPlan,
        p: &Params,
    ) -> (Reg<B32>, Option<GroupSplit>) {
        let y = Self::work_kv_slot(b);
        if !Self::splits_group(plan) {
            return (y, None);
        }
        // (at most 16: heads fit 16 bits, and a count of 1 << 32 would be 0, a loop that
        // never ends)
        let shift = b.min_u32(p.get(GROUP_SPLIT_SHIFT), 16u32);
        let kv_head = b.shr_u32(y, shift);
        let base = b.shl_b32(kv_head, shift);
        let index = b.sub_u32(y, base);
        let count = b.mov(1u32);
        let count = b.shl_b32(count, shift);
        (
            kv_head,
            Some(GroupSplit {
                index,
                count,
                shift,
            }),
        )
    }

    /// Whether the pass may split a group's query heads ([`GROUP_SPLIT_SHIFT`]: the dense
    /// pass; its parameters then also give [`HEADS`]).
    pub(super) fn splits_group(plan: &KernelPlan) -> bool {
        abi::params(plan.spec.pass)
            .iter()
            .any(|d| d.name == GROUP_SPLIT_SHIFT.name())
    }

    /// The atomic dQ of one query block.
    pub(super) fn atomic_dq(&self) -> AtomicDq<'_> {
        AtomicDq {
            smem: self.smem,
            ds_tile: &self.ds_tile,
            k_tile: &self.k_tile,
            batch_heads: (self.batch, self.heads),
            seqlen_q: self.seqlen_q,
            warp: self.dq_warp.clone(),
        }
    }

    /// The first query that sees the block's last key, computed from %ctaid and the
    /// parameters where a query block needs it rather than kept live through the loops
    /// (d128 exchange: registers).
    pub(super) fn last_first_q(&self, b: &mut Builder) -> Reg<B32> {
        let bn = self.t.block_n;
        let n_block = Self::work_key_block(b);
        let k_last = b.mad_lo_u32(n_block, bn, bn - 1);
        let shift = b.sub_s32(self.seqlen_k, self.seqlen_q);
        b.sub_s32(k_last, shift)
    }

    /// Where the block's mask changes ([`QueryEdges`]; `None` without a mask), computed
    /// where a query block needs them, as [`KeyBlock::last_first_q`]: causal, the first
    /// query that sees the last key; under a window, that minus `right`, and the last
    /// query that sees the first key (`n0 - shift + left`).
    pub(super) fn query_edges(&self, b: &mut Builder) -> Option<QueryEdges> {
        let lens = (self.seqlen_q, self.seqlen_k);
        match KeyRule::load(b, &self.p, self.plan.spec.mask, lens) {
            KeyRule::All => None,
            KeyRule::Causal => Some(QueryEdges {
                lower: self.last_first_q(b),
                upper: None,
            }),
            KeyRule::Local(w) => {
                let lfq = self.last_first_q(b);
                let lower = b.sub_s32(lfq, w.right);
                let first_lq = b.sub_s32(lfq, (self.t.block_n - 1) as i32);
                Some(QueryEdges {
                    lower,
                    upper: Some(b.add_s32(first_lq, w.left)),
                })
            }
        }
    }

    /// Without exchange, dS^T of query block j sits in stage j & 1: the atomic dQ of block
    /// j runs in the next iteration (block j - 1), past its barrier, so one barrier per
    /// block suffices. The shared address of block `j`'s dS^T.
    pub(super) fn ds_stage(&self, b: &mut Builder, j: Reg<B32>) -> Reg<B32> {
        let parity = b.and_b32(j, 1u32);
        b.mad_lo_u32(parity, self.ds_tile.bytes(), self.smem)
    }

    /// The atomic dQ of query block `blk` (first row `m0_blk`, query head `head`) when
    /// `exists`, deferred past the barrier after it: its dS^T sits in stage blk & 1.
    pub(super) fn deferred_dq(
        &self,
        b: &mut Builder,
        exists: Reg<Pred>,
        blk: (Reg<B32>, Reg<B32>),
        head: Reg<B32>,
        what: &str,
    ) {
        let run = b.and_pred(self.dq_on, exists);
        b.comment(format!("-- atomic dQ of the {what} query block --"));
        let ds = self.ds_stage(b, blk.0);
        let (p, w) = (&self.p, &self.w);
        self.atomic_dq()
            .emit_if(b, self.plan, p, w, run, ds, (head, blk.1));
    }
}
