//! Kernel layer: the backward's elementwise passes.
//!
//! Preprocess: `D[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d]` in f32, and the dQ
//! accumulator zeroed. Postprocess: `dQ = dq_accum * softmax_scale` in the element type.
//! (dq_accum is in fragment order, see [`ACCUM_TILE_FLOATS`].)
//! Both: one warp per query row, lane `l` owns elements `8l..8l+8` (one 16-byte chunk),
//! `block_m / warps` rows per warp.

use super::params::Params;
use crate::abi::{DO, DQ, DQ_ACCUM, DVEC, HEAD_DIM, O, SEQLEN_Q, SOFTMAX_SCALE};
use crate::kernels::half_fmt;
use crate::kernels::varlen::Packed;
use crate::ptx::{
    Addr, B32, B64, Builder, Cmp, Entry, F32, LaunchBounds, LdCache, Reg, Space, Special, Ty,
};
use crate::spec::{KernelPlan, Pass};
use crate::tile::convert::unpack_f32;
use crate::tile::frag::{ACCUM_ROW_RUN, ACCUM_TILE_FLOATS, AccumGrid};

/// Where a thread works: its row loop and its 16-byte chunk.
struct Rows {
    tid: Reg<B32>,
    warp: Reg<B32>,
    lane: Reg<B32>,
    head: Reg<B32>,
    batch: Reg<B32>,
    m0: Reg<B32>,
    /// The lane's chunk is inside the problem's head dim.
    chunk_ok: Reg<crate::ptx::Pred>,
    /// The (sequence's) query count.
    seqlen_q: Reg<B32>,
    /// The accumulator's (batch, head) index: `batch * heads + head` (varlen: `head`).
    bh: Reg<B32>,
    /// The accumulator row of query row m0 (varlen: past the sequence's first row).
    acc_m0: Reg<B32>,
    /// The dQ accumulator's tile grid and global address.
    grid: AccumGrid,
    accum: Reg<B64>,
}

fn rows(b: &mut Builder, plan: &KernelPlan, p: &Params) -> Rows {
    let tid = b.special(Special::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    let m_block = b.special(Special::CtaIdX);
    let head = b.special(Special::CtaIdY);
    let batch = b.special(Special::CtaIdZ);
    let heads = b.special(Special::NCtaIdY);
    let m0 = b.mul_lo_u32(m_block, plan.tiles.block_m());
    let seqlen_q = p.seqlen_q(b);
    if p.packed().is_some() {
        Packed::exit_past(b, m0, seqlen_q);
    }
    let col = b.shl_b32(lane, 3u32);
    let chunk_ok = b.setp_u32(Cmp::Lt, col, p.get(HEAD_DIM));
    let (bh, acc_m0) = p.accum_at(b, (batch, heads, head), m0);
    let grid = p.accum_grid(b, p.get(HEAD_DIM));
    let accum = b.cvta_global(p.get(DQ_ACCUM));
    Rows {
        tid,
        warp,
        lane,
        head,
        batch,
        m0,
        chunk_ok,
        seqlen_q,
        bh,
        acc_m0,
        grid,
        accum,
    }
}

/// Runs `body(b, row)` for each of the warp's rows below seqlen_q (row relative to m0),
/// skipping rows past the end with a warp-uniform branch (straight-line rows with
/// predicated loads keep every row's loads live at once: 142 registers, and slower).
fn for_rows(
    b: &mut Builder,
    plan: &KernelPlan,
    r: &Rows,
    sq_left: Reg<B32>,
    mut body: impl FnMut(&mut Builder, Reg<B32>),
) {
    let t = &plan.tiles;
    for i in 0..t.block_m() / t.warps() {
        let row = b.add_u32(r.warp, i * t.warps());
        let past = b.setp_u32(Cmp::Ge, row, sq_left);
        b.unless_uniform(past, |b| body(b, row));
    }
}

/// Zeroes the CTA's rows of dq_accum: whole tiles, one contiguous range (the CTA's rows
/// of tiles, the last one clipped at seqlen_q), 16-byte stores by every thread in turn.
fn zero_accum(b: &mut Builder, plan: &KernelPlan, p: &Params, r: &Rows) {
    let t = &plan.tiles;
    let on = b.setp_u64(Cmp::Ne, p.get(DQ_ACCUM), 0i64);
    let r16 = b.shr_u32(r.m0, 4u32);
    // the sequence's tiles (dense: the grid's rows of tiles)
    let tiles_end = match p.packed() {
        Some(_) => {
            let n = b.add_u32(r.seqlen_q, 15u32);
            b.shr_u32(n, 4u32)
        }
        None => r.grid.row_tiles,
    };
    let left = b.sub_u32(tiles_end, r16);
    let n16 = b.min_u32(left, t.block_m() / 16);
    let tiles = b.mul_lo_u32(n16, r.grid.col_tiles);
    let bytes = b.mul_lo_u32(tiles, 4 * ACCUM_TILE_FLOATS);
    let bytes = b.selp_b32(bytes, 0u32, on);
    let tile0 = r.grid.tile(b, r.bh, r.acc_m0, None);
    let off = b.mul_wide_u32(tile0, 4 * ACCUM_TILE_FLOATS);
    let base = b.add_s64(r.accum, off);
    let i = b.shl_b32(r.tid, 4u32);
    let z = b.mov(0.0f32);
    let lp = b.loop_start_divergent();
    let more = b.setp_u32(Cmp::Lt, i, bytes);
    b.loop_exit_unless(&lp, more);
    let i64 = b.cvt_u64_u32(i);
    let addr = b.add_s64(base, i64);
    b.st(Space::Global, Ty::F32, Addr::Global(addr, 0), &[z, z, z, z]);
    let next = b.add_u32(i, 16 * t.threads());
    b.assign(i, next);
    b.loop_end(lp);
}

/// Byte address of the first 4-float run of element chunk `lane` (columns `8 lane..`) of
/// row `m0 + row` in the fragment-ordered dq_accum ([`ACCUM_TILE_FLOATS`]); the second
/// run (odd columns) is 128 bytes further.
fn accum_addr(b: &mut Builder, r: &Rows, row: Reg<B32>) -> Reg<B64> {
    let row = b.add_u32(r.acc_m0, row);
    let tile = r.grid.tile(b, r.bh, row, Some(r.lane));
    let in_tile = b.and_b32(row, 15u32);
    let run = ACCUM_ROW_RUN.emit(b, in_tile);
    let run = b.mul_wide_u32(run, 4u32);
    let off = b.mad_wide_u32(tile, 4 * ACCUM_TILE_FLOATS, run);
    b.add_s64(r.accum, off)
}

/// The entry of a [`Pass::BwdPre`] spec.
pub fn build_pre(plan: &KernelPlan) -> Entry {
    let spec = &plan.spec;
    assert_eq!(spec.pass.tile_pass(), Pass::BwdPre);
    let fmt = half_fmt(spec.dtype);

    let mut b = Builder::new();
    b.comment(format!("{}: D = rowsum(dO * O); dq_accum = 0", spec.name()));
    let p = Params::load(&mut b, spec.pass);
    let r = rows(&mut b, plan, &p);
    let o_base = p.tensor(&mut b, &O, r.batch, r.m0, r.head);
    let do_base = p.tensor(&mut b, &DO, r.batch, r.m0, r.head);
    let sq_left = b.sub_u32(r.seqlen_q, r.m0);
    let lane16 = b.mul_wide_u32(r.lane, 16u32);
    let o_rb = b.shl_b32(p.row_stride(&O), 1u32);
    let do_rb = b.shl_b32(p.row_stride(&DO), 1u32);
    // dvec[(batch * heads + head) * seqlen_q + m0 + row] (varlen: [head, q0 + m0 + row])
    let drow0 = match p.packed() {
        Some(_) => Packed::stats_index(&mut b, &p, r.head, r.m0),
        None => {
            let drow0 = b.mad_wide_u32(r.bh, p.get(SEQLEN_Q), 0i64);
            let m0_64 = b.cvt_u64_u32(r.m0);
            b.add_s64(drow0, m0_64)
        }
    };
    let dvec = b.cvta_global(p.get(DVEC));
    let lane0 = b.setp_u32(Cmp::Eq, r.lane, 0u32);
    for_rows(&mut b, plan, &r, sq_left, |b, row| {
        let mut acc = b.mov(0.0f32);
        let oa = b.mad_wide_u32(row, o_rb, lane16);
        let oa = b.add_s64(o_base, oa);
        let da = b.mad_wide_u32(row, do_rb, lane16);
        let da = b.add_s64(do_base, da);
        let zeros: [Reg<B32>; 4] = std::array::from_fn(|_| b.mov(0u32));
        let (ow, dw) = (zeros, zeros.map(|_| b.mov(0u32)));
        b.when(r.chunk_ok, false, |b| {
            b.ld_into(
                Space::Global,
                LdCache::NonCoherent,
                Ty::B32,
                Addr::Global(oa, 0),
                &ow,
            );
            b.ld_into(
                Space::Global,
                LdCache::NonCoherent,
                Ty::B32,
                Addr::Global(da, 0),
                &dw,
            );
        });
        for (o, d) in ow.iter().zip(&dw) {
            let (o0, o1) = unpack_f32(b, fmt, *o);
            let (d0, d1) = unpack_f32(b, fmt, *d);
            acc = b.fma_f32(o0, d0, acc);
            acc = b.fma_f32(o1, d1, acc);
        }
        for lanes in [16, 8, 4, 2, 1] {
            let other = b.shfl_bfly_f32(acc, lanes);
            acc = b.add_f32(acc, other);
        }
        let idx = b.cvt_u64_u32(row);
        let idx = b.add_s64(drow0, idx);
        let off = b.shl_b64(idx, 2);
        let addr = b.add_s64(dvec, off);
        b.when(lane0, false, |b| {
            b.st(Space::Global, Ty::F32, Addr::Global(addr, 0), &[acc])
        });
    });
    zero_accum(&mut b, plan, &p, &r);
    finish(b, plan, &p)
}

/// The entry of a [`Pass::BwdPost`] spec.
pub fn build_post(plan: &KernelPlan) -> Entry {
    let spec = &plan.spec;
    assert_eq!(spec.pass.tile_pass(), Pass::BwdPost);
    let fmt = half_fmt(spec.dtype);

    let mut b = Builder::new();
    b.comment(format!("{}: dQ = dq_accum * softmax_scale", spec.name()));
    let p = Params::load(&mut b, spec.pass);
    let r = rows(&mut b, plan, &p);
    let dq_base = p.tensor(&mut b, &DQ, r.batch, r.m0, r.head);
    let sq_left = b.sub_u32(r.seqlen_q, r.m0);
    let scale = p.get(SOFTMAX_SCALE);
    let lane16 = b.mul_wide_u32(r.lane, 16u32);
    let rb = b.shl_b32(p.row_stride(&DQ), 1u32);
    for_rows(&mut b, plan, &r, sq_left, |b, row| {
        let src = accum_addr(b, &r, row);
        let dst = b.mad_wide_u32(row, rb, lane16);
        let dst = b.add_s64(dq_base, dst);
        b.when(r.chunk_ok, false, |b| {
            let lo: [Reg<F32>; 4] = b.ld(
                Space::Global,
                LdCache::Default,
                Ty::F32,
                Addr::Global(src, 0),
            );
            // even columns, then odd columns
            let hi: [Reg<F32>; 4] = b.ld(
                Space::Global,
                LdCache::Default,
                Ty::F32,
                Addr::Global(src, 128),
            );
            let words: Vec<Reg<B32>> = lo
                .iter()
                .zip(&hi)
                .map(|(&even, &odd)| {
                    let (even, odd) = (b.mul_f32(even, scale), b.mul_f32(odd, scale));
                    b.pack(fmt, even, odd)
                })
                .collect();
            b.st(Space::Global, Ty::B32, Addr::Global(dst, 0), &words);
        });
    });
    finish(b, plan, &p)
}

fn finish(b: Builder, plan: &KernelPlan, p: &Params) -> Entry {
    let spec = &plan.spec;
    let bounds = LaunchBounds {
        max_threads: Some(plan.tiles.threads()),
        min_ctas_per_sm: None,
        exact_threads: false,
    };
    b.finish(spec.name(), p.entry(), bounds)
}
