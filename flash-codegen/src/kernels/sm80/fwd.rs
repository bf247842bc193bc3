//! Kernel layer: FlashAttention-2 forward (Dao 2023, Algorithm 1) on the sm_80 path.
//!
//! One CTA per (query block, head, batch). Per key block: S = Q K^T (mma.sync, f32),
//! mask, online softmax, O += P V with P converted in registers. At the end O /= l and
//! the LSE is written. With the exchange layout (`fwd_exchange`) the warps split each
//! key block for S and the head dim for O, and P passes through shared memory.
//!
//! Phases: `QueryBlock::open` (parameters, the CTA's query block, Q and the first K/V
//! block issued), `QueryBlock::key_blocks` (the main loop), `QueryBlock::epilogue`.

use super::fwd_exchange::FwdExchange;
use super::mainloop::{Opening, QBlock, open};
use super::stream::{BlockStream, CopyPlan};
use super::warp::AOperand;
use super::warp_store::Cols;
use crate::abi::{HEAD_DIM, HEADS, K, LSE, O, Q, SCALE_LOG2, V};
use crate::kernels::half_fmt;
use crate::kernels::mask::{KeyMask, KeyRule, mask_block};
use crate::kernels::params::Params;
use crate::kernels::schedule::{kv_blocks, window_blocks};
use crate::kernels::scores::{AlibiBias, RowsOf, ScoreTransform, TileRows};
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::{
    Addr, B32, Builder, Cmp, Entry, F32, HalfFmt, LaunchBounds, Pred, Reg, Space, Ty,
};
use crate::spec::{KernelPlan, Sm80Tiles};
use crate::tile::acc::AccTile;
use crate::tile::copy::TileCopy;
use crate::tile::smem::SmemTile;

/// The entry of a [`Pass::Fwd`](crate::spec::Pass::Fwd) spec.
pub fn build(plan: &KernelPlan) -> Entry {
    let (mut b, f) = QueryBlock::open(plan);
    let (d, t) = (plan.spec.head_dim, &f.t);
    let resident = t.layout.resident();
    let [q_operand] = f.q.a_operands(&mut b, resident, [&f.q_tile], f.smem, d);
    let mask = f.q.mask(&mut b, f.rule, f.seqlen_q, f.seqlen_k);
    let alibi = AlibiBias::load(
        &mut b,
        &f.p,
        &plan.spec,
        (f.q.batch, f.q.head),
        f.p.get(SCALE_LOG2),
        TileRows {
            base: f.q.m0,
            row0: f.q.rows[0],
            t2: f.q.t2,
            of: RowsOf::Queries,
        },
        (f.seqlen_q, f.seqlen_k),
    );
    let mut o = f.q.acc_zeros(&mut b, f.ex.as_ref().map_or(d, |e| e.cols()));
    let mut softmax = OnlineSoftmax::new(&mut b, f.q.rows.len(), f.softmax_scale);
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

/// The CTA's query block and what the forward's phases share.
struct QueryBlock<'a> {
    plan: &'a KernelPlan,
    t: Sm80Tiles,
    fmt: HalfFmt,
    p: Params,
    q: QBlock,
    seqlen_q: Reg<B32>,
    seqlen_k: Reg<B32>,
    head_dim: Reg<B32>,
    /// Key blocks the query block visits, and the last key its first row sees.
    /// Key blocks `first..n_blocks` are visited (`first` 0 unless under a window).
    first: Reg<B32>,
    n_blocks: Reg<B32>,
    diag: Reg<B32>,
    /// Which keys each row sees (a window: its bounds).
    rule: KeyRule,
    /// The score transform, and the scale (times log2 e) the softmax applies after it.
    transform: Option<ScoreTransform>,
    softmax_scale: Reg<F32>,
    smem: Reg<B32>,
    q_tile: SmemTile,
    kv: BlockStream,
    ex: Option<FwdExchange>,
}

impl<'a> QueryBlock<'a> {
    /// The opening: parameters, the CTA's query block and key blocks, its shared memory,
    /// Q and the first K/V block issued.
    fn open(plan: &'a KernelPlan) -> (Builder, Self) {
        let spec = &plan.spec;
        let t = *plan.tiles.sm80();
        let d = spec.head_dim;
        let header = format!(
            "{}: block {}x{}, {} warps, {} stages, d {d}, smem {} bytes",
            spec.name(),
            t.block_m,
            t.block_n,
            t.warps,
            t.stages,
            plan.smem.bytes
        );
        let Opening { mut b, p, q, zero } = open(plan, header);
        let (seqlen_q, seqlen_k) = (p.seqlen_q(&mut b), p.seqlen_k(&mut b));
        let head_dim = p.get(HEAD_DIM);
        let q_base = p.tensor(&mut b, &Q, q.batch, q.m0, q.head);
        let k_base = p.tensor(&mut b, &K, q.batch, zero, q.kv_head);
        let v_base = p.tensor(&mut b, &V, q.batch, zero, q.kv_head);
        let rule = KeyRule::load(&mut b, &p, spec.mask, (seqlen_q, seqlen_k));
        let (transform, softmax_scale) =
            ScoreTransform::load(&mut b, &p, spec.scores, p.get(SCALE_LOG2));
        let (first, n_blocks, diag) = match rule.window() {
            Some(w) => window_blocks(&mut b, plan, w, (seqlen_q, seqlen_k), q.m0),
            None => {
                let (n, diag) = kv_blocks(&mut b, plan, seqlen_q, seqlen_k, q.m0);
                (zero, n, diag)
            }
        };

        b.comment("-- shared memory: Q tile, then `stages` K tiles, then `stages` V tiles --");
        let smem = b.smem_base();
        let q_tile = SmemTile::from(plan.smem.fixed[0]);
        let copies = match t.layout.exchange() {
            true => CopyPlan::AtIssue,
            false => CopyPlan::Once,
        };
        let kv = BlockStream::new(&mut b, plan, &p, (q.tid, copies), [&K, &V]);
        let ex = t
            .layout
            .exchange()
            .then(|| FwdExchange::new(&mut b, plan, &q));

        b.comment("-- issue Q and the first K/V block --");
        let stride = p.row_stride(&Q);
        let q_copy = TileCopy::new(&mut b, &q_tile, d, t.threads(), q.tid, stride, head_dim);
        q_copy.issue(&mut b, smem, q_tile.base, q_base, q.q_rows);
        if t.layout.resident() {
            b.cp_async_commit(); // Q lands first, then its fragments move to registers
        }
        kv.start(&mut b, smem, [k_base, v_base], first, seqlen_k, n_blocks);
        b.cp_async_commit();
        let f = QueryBlock {
            plan,
            t,
            fmt: half_fmt(spec.dtype),
            p,
            q,
            seqlen_q,
            seqlen_k,
            head_dim,
            first,
            n_blocks,
            diag,
            rule,
            transform,
            softmax_scale,
            smem,
            q_tile,
            kv,
            ex,
        };
        (b, f)
    }

    /// The main loop over the key blocks: S = Q K^T, the mask where a block needs it,
    /// the online softmax step, O += P V.
    fn key_blocks(
        &self,
        b: &mut Builder,
        q_operand: &AOperand,
        (mask, alibi): (&KeyMask, Option<&AlibiBias>),
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
    ) {
        let (q, kv, ex, fmt, smem) = (&self.q, &self.kv, &self.ex, self.fmt, self.smem);
        let d = self.plan.spec.head_dim;
        let (n0, kv_smem, lp) = kv.begin(b, smem, self.seqlen_k, (self.first, self.n_blocks));
        b.comment("-- S = Q K^T --");
        let mut s = q.acc_zeros(b, ex.as_ref().map_or(self.t.block_n, |e| e.keys()));
        let (k_smem, s_n0) = match ex {
            Some(e) => e.warp_keys(b, kv_smem, n0),
            None => (kv_smem, n0),
        };
        q.mma_a_bt(b, fmt, &mut s, q_operand, (&kv.tiles[0], k_smem), d);
        if let Some(t) = &self.transform {
            t.apply(b, &mut s);
        }
        if let Some(a) = alibi {
            a.apply(b, &mut s, s_n0);
        }
        b.comment("-- mask: only blocks crossing the sequence end or the causal diagonal --");
        let (seqlen_k, diag) = (self.seqlen_k, self.diag);
        let masks = (mask, self.rule);
        mask_block(b, self.plan, masks, &mut s, (n0, s_n0), seqlen_k, diag);
        b.comment("-- online softmax: m_i, l_i, P = exp2(S * scale_log2 - m_i), O *= alpha --");
        match ex {
            None => softmax.step(b, &mut s, o),
            Some(e) => {
                // the warps sharing the rows agree on the maxima, then publish their P
                let m = softmax.block_max(b, &s);
                let m = e.combine(b, q, smem, &m, |b, x, y| b.max_f32(x, y));
                softmax.step_to(b, &mut s, o, &m);
                e.share_p(b, fmt, q, &s, smem);
            }
        }
        // (one stage: the barrier here also makes P visible; more: the group's barrier does)
        kv.mid(b, smem, self.seqlen_k, self.n_blocks);
        if let Some(e) = ex.as_ref().filter(|_| !kv.syncs_mid()) {
            e.sync(b);
        }
        b.comment("-- O += P V --");
        let v = (&kv.tiles[1], kv_smem);
        match ex {
            Some(e) => e.pv(b, fmt, q, o, smem, v),
            // one m-tile at a time (V fragments reloaded per m-tile): faster at d128 than
            // sharing each V fragment between the m-tiles, which keeps both P operands
            // live (docs/performance.md)
            None => {
                for mt in 0..s.m_tiles() {
                    let pa = s.as_a(b, fmt, mt);
                    q.mma_a_b(b, fmt, &mut o.m_tile(mt), &[pa], v, 0);
                }
            }
        }
        kv.end(b, lp);
    }

    /// O /= l_i, O written through the warp's own Q rows, and the LSE.
    fn epilogue(&self, b: &mut Builder, softmax: &OnlineSoftmax, o: &mut AccTile) {
        let (p, q, ex, smem) = (&self.p, &self.q, &self.ex, self.smem);
        b.comment("-- epilogue: O /= l_i, write O (through the warp's own Q rows) and LSE --");
        let lse = match ex {
            None => softmax.finish(b, o),
            Some(e) => {
                let l = softmax.row_sums(b);
                let l = e.combine(b, q, smem, &l, |b, x, y| b.add_f32(x, y));
                softmax.finish_with(b, o, &l)
            }
        };
        let o_base = p.tensor(b, &O, q.batch, q.m0, q.head);
        // every warp reads only its own rows of Q, so once its last S = Q K^T is done they
        // are free for staging O without a CTA barrier (exchange: the pair shares its rows,
        // but the row sums' combine above is a pair barrier after both warps' last S, and
        // each warp stages only its own columns); but with no key block at all (causal rows
        // before the first key) no barrier has ordered the other threads' Q copies (landed:
        // the stream's exit waits for every copy) before this warp's staging writes
        let no_blocks = match self.rule.window() {
            Some(_) => b.setp_u32(Cmp::Eq, self.n_blocks, self.first),
            None => b.setp_u32(Cmp::Eq, self.n_blocks, 0u32),
        };
        b.if_uniform(no_blocks, Builder::bar_sync);
        let cols = match ex {
            Some(e) => {
                let c0 = e.col0(b);
                Cols::At(b.shr_u32(c0, 3u32))
            }
            None => Cols::Fixed(0),
        };
        let stride = p.row_stride(&O);
        let staging = (&self.q_tile, smem, cols);
        q.store_rows_staged(
            b,
            self.fmt,
            o,
            staging,
            o_base,
            stride,
            self.head_dim,
            q.q_rows,
        );
        let not_lse_writer = ex.as_ref().map(|e| e.not_lse_writer(b));
        store_lse(b, p, q, &lse, not_lse_writer);
    }
}

/// Lane t = 0 of each quad writes its rows' LSE, when the lse pointer is non-null and
/// `not_writer` (given when warps share the rows: all but one) does not hold.
fn store_lse(
    b: &mut Builder,
    p: &Params,
    q: &QBlock,
    lse: &[Reg<F32>],
    not_writer: Option<Reg<Pred>>,
) {
    let null = b.setp_u64(Cmp::Eq, p.get(LSE), 0i64);
    let other_lane = b.setp_u32(Cmp::Ne, q.t2, 0u32);
    let skip_all = b.or_pred(null, other_lane);
    let skip_all = match not_writer {
        Some(w) => b.or_pred(skip_all, w),
        None => skip_all,
    };
    b.unless(skip_all, |b| {
        let heads = p.get(HEADS);
        let base = q.row_stats(b, p, LSE, heads);
        for (r, &row) in q.rows.iter().enumerate() {
            let row_ok = b.setp_s32(Cmp::Lt, row, q.q_rows);
            let addr = b.mad_wide_u32(row, 4u32, base);
            b.when(row_ok, false, |b| {
                b.st(Space::Global, Ty::F32, Addr::Global(addr, 0), &[lse[r]])
            });
        }
    });
}
