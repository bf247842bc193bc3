//! Kernel layer, sm_80 backward main pass: dQ written by the main pass itself (the dense
//! pass in atomic mode, given `dq_count`), so no postprocess pass reads the accumulator
//! back from memory.
//!
//! Query block m's accumulator rows receive the `red.add`s of one run of key blocks (the
//! visit rule of [`KeyBlock::open`] is monotone in the key block, so its inverse is a run
//! `n_a(m)..=n_b(m)`, in closed form: `scripts/dq_contributors.py` checks it against the
//! rule by brute force). At the end of each query head every CTA arrives at the counter
//! of each query block it visited (`atom.acq_rel.gpu.inc` with the block's contributor
//! count less one as the bound, so the counter wraps back to 0 on the last arrival, and
//! the barrier before it orders every warp's `red.add`s first); the CTA whose arrival
//! is the last reads the block back (L2-hot: its contributors ran together), scales it,
//! stores dQ and zeroes the rows again: the accumulator and the counters are all zero
//! before and after every call. Query blocks no key block visits (those below the first
//! key block's first, under a causal mask or a window with more queries than keys: their
//! rows see no key) are converted by the first key block without an arrival: dQ = 0 from
//! their zeros. (The last key block's range always ends at the last query block, so there
//! is no such suffix: `scripts/dq_contributors.py` checks that too.)

use super::KeyBlock;
use crate::abi::{DQ, DQ_ACCUM, DQ_COUNT, HEAD_DIM, HEADS, HEADS_PER_KV, SOFTMAX_SCALE};
use crate::kernels::mask::KeyRule;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, LdCache, Pred, Reg, Space, Special, Ty};
use crate::spec::Pass;
use crate::tile::frag::{ACCUM_ROW_RUN, ACCUM_TILE_FLOATS, AccumGrid};

/// Rows (per thread) whose accumulator loads are in flight together in a conversion.
const ROWS_IN_FLIGHT: u32 = 2;

/// What the fold reads, derived again after the sweep from the parameters and the CTA's
/// ids (values kept from the kernel's opening would hold registers through the loops).
pub(super) struct Fold {
    seqlen_q: Reg<B32>,
    seqlen_k: Reg<B32>,
    head_dim: Reg<B32>,
    batch: Reg<B32>,
    heads: Reg<B32>,
    tid: Reg<B32>,
    smem: Reg<B32>,
    rule: KeyRule,
    /// The query blocks that see the CTA's key block: `m_first..n_qblocks`.
    m_first: Reg<B32>,
    n_qblocks: Reg<B32>,
    /// The fold runs: `dq_count` and `dq_accum` are given.
    on: Reg<Pred>,
}

/// How a CTA's threads cover a block of dQ rows: thread `tid` takes 8-column chunk
/// `tid % chunks` of row `tid / chunks` (then `rows_per_pass` rows further, ...).
struct RowCover {
    /// Rows covered at once: threads / chunks per row (the kernel's head dim / 8 rounded
    /// up to a power of two).
    rows_per_pass: u32,
    /// The thread's first row and its chunk.
    row: Reg<B32>,
    chunk: Reg<B32>,
    /// The chunk is inside the problem's head dim.
    chunk_ok: Reg<Pred>,
}

impl KeyBlock<'_> {
    /// Whether the kernel can write dQ itself (the dense main pass).
    pub(super) fn folds_dq(&self) -> bool {
        self.plan.spec.pass == Pass::Bwd
    }

    /// The fold's values (see [`Fold`]).
    pub(super) fn fold_ctx(&self, b: &mut Builder) -> Fold {
        let (p, plan) = (&self.p, self.plan);
        let (seqlen_q, seqlen_k) = (p.seqlen_q(b), p.seqlen_k(b));
        let rule = KeyRule::load(b, p, plan.spec.mask, (seqlen_q, seqlen_k));
        let n_block = b.special(Special::CtaIdX);
        let n0 = b.mul_lo_u32(n_block, self.t.block_n);
        let zero = b.mov(0u32);
        let lengths = (seqlen_q, seqlen_k);
        let (m_first, n_qblocks) = Self::query_blocks(b, plan, rule, (n0, zero), lengths);
        let heads = match Self::splits_group(plan) {
            true => p.get(HEADS),
            false => {
                let heads_k = b.special(Special::NCtaIdY);
                b.mul_lo_u32(heads_k, p.get(HEADS_PER_KV))
            }
        };
        let on = b.setp_u64(Cmp::Ne, p.get(DQ_COUNT), 0i64);
        let acc_on = b.setp_u64(Cmp::Ne, p.get(DQ_ACCUM), 0i64);
        Fold {
            seqlen_q,
            seqlen_k,
            head_dim: p.get(HEAD_DIM),
            batch: b.special(Special::CtaIdZ),
            heads,
            tid: b.special(Special::TidX),
            smem: b.smem_base(),
            rule,
            m_first,
            n_qblocks,
            on: b.and_pred(on, acc_on),
        }
    }

    /// After the sweep's stores, for each query head `head` of the CTA: with `dq_count`
    /// given, dQ = 0 for the rows no key block sees, the arrivals, and the conversions of
    /// the blocks this CTA completes.
    pub(super) fn fold_dq(&self, b: &mut Builder, f: &Fold, head: Reg<B32>) {
        b.if_uniform(f.on, |b| {
            b.comment("-- dQ in the main pass: arrivals, the blocks this CTA completes --");
            // every warp's dQ atomics are issued (and the stores' reads of shared memory
            // done) before the arrivals
            b.bar_sync();
            let cover = self.row_cover(b, f);
            self.arrive(b, f, head, &cover);
        });
    }

    fn row_cover(&self, b: &mut Builder, f: &Fold) -> RowCover {
        let chunks = (self.plan.spec.head_dim / 8).next_power_of_two();
        let tid = f.tid;
        let row = b.shr_u32(tid, chunks.trailing_zeros());
        let chunk = b.and_b32(tid, chunks - 1);
        let col = b.shl_b32(chunk, 3u32);
        RowCover {
            rows_per_pass: self.t.threads() / chunks,
            row,
            chunk,
            chunk_ok: b.setp_u32(Cmp::Lt, col, f.head_dim),
        }
    }

    /// The arrivals at the head's visited query blocks, one per thread in rounds of the
    /// CTA's threads, each round's flags (this CTA's arrival was the block's last)
    /// through shared memory (the first Q stage: the stream is idle between heads), then
    /// the flagged blocks converted.
    fn arrive(&self, b: &mut Builder, f: &Fold, head: Reg<B32>, c: &RowCover) {
        let (p, t) = (&self.p, &self.t);
        let threads = t.threads();
        let tid = f.tid;
        let bh = b.mad_lo_u32(f.batch, f.heads, head);
        let row_tiles = b.add_u32(f.seqlen_q, 15u32);
        let row_tiles = b.shr_u32(row_tiles, 4u32);
        let counters = b.cvta_global(p.get(DQ_COUNT));
        let first = b.mul_wide_u32(bh, row_tiles);
        let first = b.shl_b64(first, 2);
        let counters = b.add_s64(counters, first);
        let flags = b.add_u32(f.smem, self.qs.tiles[0].base);
        let my_flag = b.mad_lo_u32(tid, 4u32, flags);
        // the first key block also takes the query blocks below its first visited one,
        // which no key block visits (their rows see no key: dQ = 0 from the zeros there)
        let n_block = b.special(Special::CtaIdX);
        let first_block = b.setp_u32(Cmp::Eq, n_block, 0u32);
        let start = b.selp_b32(0u32, f.m_first, first_block);
        let visited = b.sub_u32(f.n_qblocks, start);
        let round = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, round, visited);
        b.loop_exit_unless(&lp, more);
        let j = b.add_u32(round, tid);
        let mine = b.setp_u32(Cmp::Lt, j, visited);
        let m = b.add_u32(start, j);
        let seen = b.setp_u32(Cmp::Ge, m, f.m_first);
        let arrives = b.and_pred(mine, seen);
        let unseen = b.setp_u32(Cmp::Lt, m, f.m_first);
        let unseen = b.and_pred(mine, unseen);
        let flag = b.selp_b32(1u32, 0u32, unseen);
        b.when(arrives, false, |b| {
            let bound = self.contributors(b, f, m);
            let bound = b.sub_u32(bound, 1u32);
            let idx = b.mul_lo_u32(m, t.block_m / 16);
            let off = b.mul_wide_u32(idx, 4u32);
            let addr = b.add_s64(counters, off);
            let old = b.atom_inc_u32(Addr::Global(addr, 0), bound, true);
            let last = b.setp_u32(Cmp::Eq, old, bound);
            let one = b.selp_b32(1u32, 0u32, last);
            b.assign(flag, one);
        });
        b.st(Space::Shared, Ty::B32, Addr::Shared(my_flag, 0), &[flag]);
        b.bar_sync();
        let left = b.sub_u32(visited, round);
        let n = b.min_u32(left, threads);
        let k = b.mov(0u32);
        let inner = b.loop_start();
        let go = b.setp_u32(Cmp::Lt, k, n);
        b.loop_exit_unless(&inner, go);
        let at = b.mad_lo_u32(k, 4u32, flags);
        let [flag]: [Reg<B32>; 1] = b.ld(
            Space::Shared,
            LdCache::Default,
            Ty::B32,
            Addr::Shared(at, 0),
        );
        let set = b.setp_u32(Cmp::Ne, flag, 0u32);
        b.if_uniform(set, |b| {
            let m = b.add_u32(start, round);
            let m = b.add_u32(m, k);
            self.convert(b, (f, bh, head), m, c);
        });
        let k1 = b.add_u32(k, 1u32);
        b.assign(k, k1);
        b.loop_end(inner);
        // the flags are read before the next round (or the next head's stream) rewrites them
        b.bar_sync();
        let next = b.add_u32(round, threads);
        b.assign(round, next);
        b.loop_end(lp);
    }

    /// The key blocks that add into query block `m` (at least 1 for a visited block):
    /// `n_b - n_a + 1` with, for shift = seqlen_k - seqlen_q and NK key blocks,
    /// `n_b + 1 = min(NK, ceil(((m + 1) bm + shift + right) / bn))` (causal: right = 0;
    /// no mask: NK) and `n_a = max(0, ceil(((m + 1) bm - (left - shift + bn + bm - 1)) /
    /// bn))` under a window (else 0).
    fn contributors(&self, b: &mut Builder, f: &Fold, m: Reg<B32>) -> Reg<B32> {
        let rule = f.rule;
        let (bm, bn) = (self.t.block_m, self.t.block_n);
        let nk = b.add_u32(f.seqlen_k, bn - 1);
        let nk = b.div_u32(nk, bn);
        if let KeyRule::All = rule {
            return nk;
        }
        let shift = b.sub_s32(f.seqlen_k, f.seqlen_q);
        let end = b.mad_lo_u32(m, bm, bm); // (m + 1) bm
        let hi = b.add_s32(end, shift);
        let hi = match rule.window() {
            Some(w) => b.add_s32(hi, w.right),
            None => hi,
        };
        let hi = b.max_s32(hi, 0i32);
        let hi = b.add_u32(hi, bn - 1);
        let nb1 = b.div_u32(hi, bn);
        let nb1 = b.min_u32(nb1, nk);
        let Some(w) = rule.window() else {
            return nb1;
        };
        // (m + 1) bm + shift - left - (bn + bm - 1)
        let lo = b.add_s32(end, shift);
        let lo = b.sub_s32(lo, w.left);
        let lo = b.sub_s32(lo, (bn + bm - 1) as i32);
        let lo = b.max_s32(lo, 0i32);
        let lo = b.add_u32(lo, bn - 1);
        let na = b.div_u32(lo, bn);
        b.sub_u32(nb1, na)
    }

    /// dQ of query block `m` of head `head` from its accumulator rows (whole 16-row tiles,
    /// read through L2: other CTAs added into them), which are zeroed again: rows of
    /// [`ROWS_IN_FLIGHT`] passes loaded together, then stored.
    fn convert(
        &self,
        b: &mut Builder,
        (f, bh, head): (&Fold, Reg<B32>, Reg<B32>),
        m: Reg<B32>,
        c: &RowCover,
    ) {
        let (p, bm) = (&self.p, self.t.block_m);
        let m0 = b.mul_lo_u32(m, bm);
        let grid: AccumGrid = p.accum_grid(b, f.head_dim);
        // accumulator rows of the block (whole tiles inside the grid) and dQ rows
        let r16 = b.shr_u32(m0, 4u32);
        let tiles_left = b.sub_u32(grid.row_tiles, r16);
        let acc_rows = b.shl_b32(tiles_left, 4u32);
        let q_rows = b.sub_u32(f.seqlen_q, m0);
        let tile0 = grid.tile(b, bh, m0, Some(c.chunk));
        let accum = b.cvta_global(p.get(DQ_ACCUM));
        let dq = p.tensor(b, &DQ, f.batch, m0, head);
        let col_bytes = b.shl_b32(c.chunk, 4u32);
        let col_bytes = b.cvt_u64_u32(col_bytes);
        let dq = b.add_s64(dq, col_bytes);
        let rb = b.shl_b32(p.row_stride(&DQ), 1u32);
        let scale: Reg<F32> = p.get(SOFTMAX_SCALE);
        let passes = bm.div_ceil(c.rows_per_pass);
        let zero = b.mov(0.0f32);
        for group in (0..passes)
            .collect::<Vec<_>>()
            .chunks(ROWS_IN_FLIGHT as usize)
        {
            let rows: Vec<(Reg<B32>, Reg<Pred>, Reg<B64>)> = group
                .iter()
                .map(|&pass| {
                    let row = b.add_u32(c.row, pass * c.rows_per_pass);
                    let ok = b.setp_u32(Cmp::Lt, row, acc_rows);
                    let ok = b.and_pred(ok, c.chunk_ok);
                    let in_block = b.setp_u32(Cmp::Lt, row, bm);
                    let ok = b.and_pred(ok, in_block);
                    let tiles = b.shr_u32(row, 4u32);
                    let tile = b.mad_lo_u32(tiles, grid.col_tiles, tile0);
                    let in_tile = b.and_b32(row, 15u32);
                    let run = ACCUM_ROW_RUN.emit(b, in_tile);
                    let run = b.mul_wide_u32(run, 4u32);
                    let off = b.mad_wide_u32(tile, 4 * ACCUM_TILE_FLOATS, run);
                    (row, ok, b.add_s64(accum, off))
                })
                .collect();
            // even columns, then odd columns (128 bytes on)
            let vals: Vec<([Reg<F32>; 4], [Reg<F32>; 4])> = rows
                .iter()
                .map(|&(_, ok, addr)| {
                    b.when(ok, false, |b| {
                        let even = b.ld(
                            Space::Global,
                            LdCache::L2Only,
                            Ty::F32,
                            Addr::Global(addr, 0),
                        );
                        let odd = b.ld(
                            Space::Global,
                            LdCache::L2Only,
                            Ty::F32,
                            Addr::Global(addr, 128),
                        );
                        (even, odd)
                    })
                })
                .collect();
            for (&(row, ok, addr), (even, odd)) in rows.iter().zip(&vals) {
                b.when(ok, false, |b| {
                    b.st(Space::Global, Ty::F32, Addr::Global(addr, 0), &[zero; 4]);
                    b.st(Space::Global, Ty::F32, Addr::Global(addr, 128), &[zero; 4]);
                });
                let words: Vec<Reg<B32>> = even
                    .iter()
                    .zip(odd)
                    .map(|(&e, &o)| {
                        let (e, o) = (b.mul_f32(e, scale), b.mul_f32(o, scale));
                        b.pack(self.fmt, e, o)
                    })
                    .collect();
                let below = b.setp_u32(Cmp::Lt, row, q_rows);
                let store = b.and_pred(ok, below);
                let off = b.mul_wide_u32(row, rb);
                let at = b.add_s64(dq, off);
                b.when(store, false, |b| {
                    b.st(Space::Global, Ty::B32, Addr::Global(at, 0), &words)
                });
            }
        }
    }
}
