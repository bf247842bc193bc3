//! Kernel layer: the split-KV forward against a KV cache on the sm_80 path (decode,
//! speculative verification, chunked prefill; flash-decoding).
//!
//! One CTA per (block of packed rows, KV head, batch x split). The packed rows of a KV
//! head are its `heads_per_kv` query heads times the `seqlen_q` new positions
//! ([`crate::abi::decode`]), so every K/V byte a CTA reads serves the whole group. The CTA
//! runs FA2's main loop (S = Q K^T, mask, online softmax, O += P V) over its split's share
//! of the sequence's key blocks, the sequence's length read from `seqlens_k` and clamped to
//! the cache's capacity. With one split it writes O and the LSE; with more, its partial O
//! (normalised, f32) and LSE for the combine pass ([`crate::kernels::combine`]).
//!
//! Phases: `SplitBlock::open` (coordinates, the sequence's key range, Q gathered and the
//! first K/V block issued), `SplitBlock::key_blocks`, `SplitBlock::epilogue`.

mod store;

use super::key_split;
use super::mainloop::QBlock;
use super::stream::{BlockStream, CopyPlan, PagedRows};
use super::warp::{AOperand, Warp};
use crate::abi::{
    HEAD_DIM, HEADS_PER_KV, K, NUM_SPLITS, Q, SCALE_LOG2, SEQLEN_K, SEQLEN_Q, SEQLENS_K,
    TensorArgs, V,
};
use crate::kernels::half_fmt;
use crate::kernels::mask::{KeyMask, KeyRule, mask_block};
use crate::kernels::params::Params;
use crate::kernels::schedule::{packed_kv_blocks, packed_window_blocks};
use crate::kernels::scores::{AlibiBias, ScoreTransform};
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::{
    Addr, B32, B64, Builder, Cmp, Entry, F32, HalfFmt, LaunchBounds, LdCache, Reg, Space, Special,
    Ty,
};
use crate::spec::{KernelPlan, Pass, Scores, Sm80Tiles};
use crate::tile::acc::AccTile;
use crate::tile::copy::TileCopy;
use crate::tile::smem::SmemTile;

/// The entry of a [`Pass::FwdSplit`] spec.
pub fn build(plan: &KernelPlan) -> Entry {
    let (mut b, f) = SplitBlock::open(plan);
    let (d, t) = (plan.spec.head_dim, &f.t);
    let w = &f.q.w;
    let [q_operand] = w.a_operands(&mut b, t.layout.resident(), [&f.q_tile], f.smem, d);
    let mask = KeyMask::new(
        &mut b,
        f.rule,
        &f.positions,
        w.t2,
        f.p.get(SEQLEN_Q),
        f.seqlen_k,
    );
    let alibi = f.alibi(&mut b);
    let mut o = w.acc_zeros(&mut b, d);
    let mut softmax = OnlineSoftmax::new(&mut b, w.rows.len(), f.softmax_scale);
    f.key_blocks(
        &mut b,
        &q_operand,
        (&mask, alibi.as_ref()),
        &mut softmax,
        &mut o,
    );
    f.epilogue(&mut b, &softmax, &mut o);
    let bounds = LaunchBounds {
        max_threads: Some(t.threads()),
        min_ctas_per_sm: Some(plan.ctas_per_sm_hint()),
        exact_threads: false,
    };
    b.finish(plan.spec.name(), f.p.entry(), bounds)
}

/// The CTA's packed rows, its split of the key range, and what the phases share.
struct SplitBlock<'a> {
    plan: &'a KernelPlan,
    t: Sm80Tiles,
    fmt: HalfFmt,
    p: Params,
    /// The packed rows (`q.head` is the group's first query head; `q.q_rows` counts the
    /// block's packed rows that exist).
    q: QBlock,
    split: Reg<B32>,
    /// The query position of each of the thread's rows.
    positions: Vec<Reg<B32>>,
    /// The sequence's keys (`seqlens_k[batch]` clamped to the capacity).
    seqlen_k: Reg<B32>,
    /// The split's key blocks `first..end`, and the last key the block's first row sees.
    first: Reg<B32>,
    end: Reg<B32>,
    diag: Reg<B32>,
    /// Which keys each row sees (a window: its bounds).
    rule: KeyRule,
    /// The score transform, and the scale (times log2 e) the softmax applies after it.
    transform: Option<ScoreTransform>,
    softmax_scale: Reg<F32>,
    /// No row of the warp exists: it skips the products (warp-uniform).
    warp_idle: Reg<crate::ptx::Pred>,
    smem: Reg<B32>,
    q_tile: SmemTile,
    kv: BlockStream,
}

impl<'a> SplitBlock<'a> {
    fn open(plan: &'a KernelPlan) -> (Builder, Self) {
        let spec = &plan.spec;
        let t = *plan.tiles.sm80();
        let d = spec.head_dim;
        let mut b = Builder::new();
        b.comment(format!(
            "{}: split-KV, packed rows {}, block_n {}, {} warps, {} stages, d {d}, smem {} bytes",
            spec.name(),
            t.block_m,
            t.block_n,
            t.warps,
            t.stages,
            plan.smem.bytes
        ));
        let p = Params::load_spec(&mut b, spec);
        let zero = b.mov(0u32);
        let w = match t.layout.key_split() {
            true => Warp::with_row_blocks(&mut b, 1, Some(1)), // every warp: rows 0..16
            false => Warp::new(&mut b, (t.block_m / t.warps / 16) as usize),
        };

        b.comment("-- coordinates: packed query block, KV head, batch and split --");
        let m_block = b.special(Special::CtaIdX);
        let kv_head = b.special(Special::CtaIdY);
        let z = b.special(Special::CtaIdZ);
        let splits = p.get(NUM_SPLITS);
        let batch = b.div_u32(z, splits);
        let split = b.rem_u32(z, splits);
        let hpk = p.get(HEADS_PER_KV);
        let (seqlen_q, capacity) = (p.get(SEQLEN_Q), p.get(SEQLEN_K));
        let m0 = b.mul_lo_u32(m_block, t.block_m);
        let packed = b.mul_lo_u32(seqlen_q, hpk);
        let q_rows = b.sub_u32(packed, m0);
        let head0 = b.mul_lo_u32(kv_head, hpk);
        let positions = w
            .rows
            .iter()
            .map(|&r| {
                let pr = b.add_u32(m0, r);
                b.div_u32(pr, hpk)
            })
            .collect();
        let warp_idle = b.setp_u32(Cmp::Ge, w.warp_row, q_rows);
        let q = QBlock {
            w,
            m0,
            head: head0,
            batch,
            kv_head,
            q_rows,
        };

        b.comment("-- the sequence's keys: seqlens_k[batch] clamped to [0, capacity] --");
        let seqlen_k = b.mov(capacity);
        let lens = p.get(SEQLENS_K);
        let given = b.setp_u64(Cmp::Ne, lens, 0i64);
        b.if_uniform(given, |b| {
            let lens = b.cvta_global(lens);
            let at = b.mad_wide_u32(batch, 4u32, lens);
            let [n]: [Reg<B32>; 1] = b.ld(
                Space::Global,
                LdCache::NonCoherent,
                Ty::B32,
                Addr::Global(at, 0),
            );
            let n = b.max_s32(n, 0i32);
            let n = b.min_u32(n, capacity);
            b.assign(seqlen_k, n);
        });

        let rule = KeyRule::load(&mut b, &p, spec.mask, (seqlen_q, seqlen_k));
        let (transform, softmax_scale) =
            ScoreTransform::load(&mut b, &p, spec.scores, p.get(SCALE_LOG2));
        let (first, end, diag) = match rule.window() {
            None => {
                b.comment("-- the split's key blocks: an equal share of the sequence's --");
                let (n, diag) = packed_kv_blocks(&mut b, plan, (seqlen_q, seqlen_k), m0, hpk);
                let (first, end) = split_share(&mut b, (split, splits), (None, n));
                (first, end, diag)
            }
            Some(w) => {
                b.comment("-- the split's key blocks: an equal share of the window's --");
                let (lo, hi, diag) =
                    packed_window_blocks(&mut b, plan, w, (seqlen_q, seqlen_k), m0, hpk);
                let (first, end) = split_share(&mut b, (split, splits), (Some(lo), hi));
                (first, end, diag)
            }
        };

        let smem = b.smem_base();
        let q_tile = SmemTile::from(plan.smem.fixed[0]);
        // (stages - 1 blocks in flight: a split streams its key range alone)
        let kv = BlockStream::new(&mut b, plan, &p, (q.tid, CopyPlan::Once), [&K, &V]).deep();

        b.comment("-- gather the packed Q rows, issue the split's first K/V block --");
        let q_batch = p.tensor(&mut b, &Q, batch, zero, zero);
        let stride = p.row_stride(&Q);
        let head_dim = p.get(HEAD_DIM);
        let q_copy = TileCopy::new(&mut b, &q_tile, d, t.threads(), q.tid, stride, head_dim);
        q_copy.issue_gathered(&mut b, (smem, q_tile.base), q_batch, q_rows, |b, row| {
            packed_row_addr(b, &p, &Q, q_batch, (m0, row), (hpk, head0))
        });
        if t.layout.resident() {
            b.cp_async_commit(); // Q lands first, then its fragments move to registers
        }
        // paged: K and V are pools of pages (their batch dim), the rows found in the
        // sequence's page-table row; contiguous: the batch's cache
        let kv_batch = match spec.pass {
            Pass::FwdPaged => zero,
            _ => batch,
        };
        let k_base = p.tensor(&mut b, &K, kv_batch, zero, kv_head);
        let v_base = p.tensor(&mut b, &V, kv_batch, zero, kv_head);
        let kv = match spec.pass {
            Pass::FwdPaged => {
                // table entries read a block ahead, one register per run of copies; at
                // most 4 from d224 on (ptxas -v: 8 bytes of spills with 8)
                let slots = if d < 224 { u32::MAX } else { 4 };
                let copy = kv.planned_copy().expect("fwdsplit plans its copies once");
                let geometry = (batch, kv.block_rows(), slots);
                let pools = ([&K, &V], [k_base, v_base]);
                let pages = PagedRows::new(&mut b, &p, geometry, pools, copy);
                kv.paged(pages)
            }
            _ => kv,
        };
        kv.start(&mut b, smem, [k_base, v_base], first, seqlen_k, end);
        b.cp_async_commit();
        kv.start_ahead(&mut b, smem, seqlen_k, (first, end));
        let f = SplitBlock {
            plan,
            t,
            fmt: half_fmt(spec.dtype),
            p,
            q,
            split,
            positions,
            seqlen_k,
            first,
            end,
            diag,
            rule,
            transform,
            softmax_scale,
            warp_idle,
            smem,
            q_tile,
            kv,
        };
        (b, f)
    }

    /// FA2's main loop over the split's key blocks. Warps without a packed row (few
    /// queries: one decode token of a small group fills 4 of 64 rows) skip the products
    /// but keep streaming their share of the copies.
    fn key_blocks(
        &self,
        b: &mut Builder,
        q_operand: &AOperand,
        (mask, alibi): (&KeyMask, Option<&AlibiBias>),
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
    ) {
        let (q, kv, fmt, smem) = (&self.q, &self.kv, self.fmt, self.smem);
        let d = self.plan.spec.head_dim;
        assert!(
            !kv.syncs_mid(),
            "generator bug: the split forward streams two or more stages"
        );
        let range = (self.first, self.end);
        let (n0, kv_smem, lp) = kv.begin(b, smem, self.seqlen_k, range);
        // key split: the warp's keys of the block (its K and V rows, and its scores' keys)
        let (at, s_n0, keys) = match self.t.layout.key_split() {
            true => {
                let (off, key0) = key_split::warp_keys(b, self.plan, &q.w);
                let at = b.add_u32(kv_smem, off);
                (at, b.add_u32(n0, key0), key_split::keys_per_warp(self.plan))
            }
            false => (kv_smem, n0, self.t.block_n),
        };
        b.unless_uniform(self.warp_idle, |b| {
            b.comment("-- S = Q K^T --");
            let mut s = q.acc_zeros(b, keys);
            q.mma_a_bt(b, fmt, &mut s, q_operand, (&kv.tiles[0], at), d);
            if let Some(t) = &self.transform {
                t.apply(b, &mut s);
            }
            if let Some(a) = alibi {
                a.apply(b, &mut s, s_n0);
            }
            b.comment(match self.rule.window() {
                None => "-- mask: blocks crossing the sequence end or the causal diagonal --",
                Some(_) => "-- mask: blocks crossing the sequence end or the window's edges --",
            });
            mask_block(
                b,
                self.plan,
                (mask, self.rule),
                &mut s,
                (n0, s_n0),
                self.seqlen_k,
                self.diag,
            );
            b.comment("-- online softmax; O += P V --");
            softmax.step(b, &mut s, o);
            let v = (&kv.tiles[1], at);
            for mt in 0..s.m_tiles() {
                let pa = s.as_a(b, fmt, mt);
                q.mma_a_b(b, fmt, &mut o.m_tile(mt), &[pa], v, 0);
            }
        });
        kv.end(b, lp);
    }

    /// ALiBi's bias on the thread's packed rows (`None` for other scores): row `m0 + r`
    /// is position `(m0 + r) / hpk` of query head `head0 + (m0 + r) % hpk`.
    fn alibi(&self, b: &mut Builder) -> Option<AlibiBias> {
        if self.plan.spec.scores != Scores::Alibi {
            return None;
        }
        let (q, hpk) = (&self.q, self.p.get(HEADS_PER_KV));
        let heads: Vec<Reg<B32>> = (q.w.rows.iter())
            .map(|&r| {
                let pr = b.add_u32(q.m0, r);
                let g = b.rem_u32(pr, hpk);
                b.add_u32(q.head, g)
            })
            .collect();
        let rows = (q.batch, heads.as_slice(), self.positions.as_slice());
        let scale = (q.w.t2, self.p.get(SCALE_LOG2));
        let lengths = (self.p.get(SEQLEN_Q), self.seqlen_k);
        AlibiBias::packed(b, &self.p, &self.plan.spec, rows, scale, lengths)
    }

    /// O /= l; one split: O (element type) and the LSE to the caller's tensors; more: the
    /// partial O (f32) and LSE of this split, every packed row that exists.
    fn epilogue(&self, b: &mut Builder, softmax: &OnlineSoftmax, o: &mut AccTile) {
        let p = &self.p;
        b.comment("-- epilogue: O /= l_i; one split: O and LSE, else the split's partials --");
        let store = |b: &mut Builder, o: &AccTile, lse: &[Reg<F32>]| {
            let one = b.setp_u32(Cmp::Eq, p.get(NUM_SPLITS), 1u32);
            b.if_else_uniform(
                one,
                |b| self.store_output(b, o, lse),
                |b| self.store_partials(b, o, lse),
            );
        };
        if self.t.layout.key_split() {
            // the warps' states merge into warp 0, which stores
            let base = self.plan.smem.stream.expect("a stream region").base;
            let lse = key_split::merge(b, self.plan, &self.q.w, (self.smem, base), softmax, o);
            let warp0 = b.setp_u32(Cmp::Eq, self.q.warp, 0u32);
            b.if_uniform(warp0, |b| store(b, o, &lse));
        } else {
            let lse = softmax.finish(b, o);
            store(b, o, &lse);
        }
    }
}

/// Split `split` of `splits`' key blocks `first..end`: an equal share, `ceil((end -
/// first) / splits)` blocks, of the range (`first` `None`: 0), clamped to it.
fn split_share(
    b: &mut Builder,
    (split, splits): (Reg<B32>, Reg<B32>),
    (first, end): (Option<Reg<B32>>, Reg<B32>),
) -> (Reg<B32>, Reg<B32>) {
    let count = match first {
        Some(f) => b.sub_u32(end, f),
        None => end,
    };
    let share = b.add_u32(count, splits);
    let share = b.sub_u32(share, 1u32);
    let share = b.div_u32(share, splits);
    let at = b.mul_lo_u32(split, share);
    let at = match first {
        Some(f) => b.add_u32(f, at),
        None => at,
    };
    let at = b.min_u32(at, end);
    let last = b.add_u32(at, share);
    (at, b.min_u32(last, end))
}

/// The address of packed row `m0 + row` of tensor `t` (Q): [`packed_coords`] then
/// [`row_addr_of`].
fn packed_row_addr(
    b: &mut Builder,
    p: &Params,
    t: &TensorArgs,
    base: Reg<B64>,
    rows: (Reg<B32>, Reg<B32>),
    group: (Reg<B32>, Reg<B32>),
) -> Reg<B64> {
    let (pos, head) = store::packed_coords(b, rows, group);
    store::row_addr_of(b, p, t, base, pos, head)
}
