//! Kernel layer: the backward's elementwise passes.
//!
//! Preprocess: `D[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d]` in f32, and the dQ
//! accumulator zeroed. Postprocess: `dQ = dq_accum * softmax_scale` in the element type.
//! Both: one warp per query row, lane `l` owns elements `8l..8l+8` (one 16-byte chunk),
//! `block_m / warps` rows per warp.

use super::params::Params;
use crate::abi;
use crate::ptx::{
    Addr, B32, B64, Builder, Cmp, Entry, F32, LaunchBounds, LdCache, Reg, Space, Special, Ty,
};
use crate::spec::{KernelSpec, Pass};
use crate::tile::convert::unpack_f32;

/// Where a thread works: its row loop and its 16-byte chunk.
struct Rows {
    warp: Reg<B32>,
    lane: Reg<B32>,
    head: Reg<B32>,
    batch: Reg<B32>,
    heads: Reg<B32>,
    m0: Reg<B32>,
    /// The lane's chunk is inside the problem's head dim.
    chunk_ok: Reg<crate::ptx::Pred>,
}

fn rows(b: &mut Builder, spec: &KernelSpec, p: &Params) -> Rows {
    let tid = b.special(Special::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    let m_block = b.special(Special::CtaIdX);
    let head = b.special(Special::CtaIdY);
    let batch = b.special(Special::CtaIdZ);
    let heads = b.special(Special::NCtaIdY);
    let m0 = b.mul_lo_u32(m_block, spec.tiles().block_m);
    let col = b.shl_b32(lane, 3u32);
    let chunk_ok = b.setp_u32(Cmp::Lt, col, p.u32("head_dim"));
    Rows {
        warp,
        lane,
        head,
        batch,
        heads,
        m0,
        chunk_ok,
    }
}

/// Runs `body(b, row)` for each of the warp's rows below seqlen_q (row relative to m0),
/// skipping rows past the end with a warp-uniform branch.
fn for_rows(
    b: &mut Builder,
    spec: &KernelSpec,
    r: &Rows,
    sq_left: Reg<B32>,
    mut body: impl FnMut(&mut Builder, Reg<B32>),
) {
    let t = spec.tiles();
    for i in 0..t.block_m / t.warps {
        let row = b.add_u32(r.warp, i * t.warps);
        let past = b.setp_u32(Cmp::Ge, row, sq_left);
        let skip = b.label();
        b.bra_if(past, false, skip, true);
        body(b, row);
        b.place(skip);
    }
}

/// Byte address of element chunk `lane` of row `m0 + row` of the f32 [b, sq, h, d] dq_accum.
fn accum_addr(b: &mut Builder, p: &Params, r: &Rows, row: Reg<B32>) -> Reg<B64> {
    let seq = b.mad_lo_u32(r.batch, p.u32("seqlen_q"), r.m0);
    let seq = b.add_u32(seq, row);
    let hrow = b.mad_lo_u32(seq, r.heads, r.head);
    let base = b.cvta_global(p.u64("dq_accum"));
    let elem = b.mul_wide_u32(hrow, p.u32("head_dim"));
    let lane8 = b.shl_b32(r.lane, 3u32);
    let lane8 = b.cvt_u64_u32(lane8);
    let elem = b.add_s64(elem, lane8);
    let bytes = b.shl_b64(elem, 2);
    b.add_s64(base, bytes)
}

/// The entry of a [`Pass::BwdPre`] spec.
pub fn build_pre(spec: &KernelSpec) -> Entry {
    assert_eq!(spec.pass, Pass::BwdPre);
    let fmt = spec.dtype.half_fmt();
    let ir_params = abi::ir_params(spec.pass);
    let mut b = Builder::new();
    b.comment(format!("{}: D = rowsum(dO * O); dq_accum = 0", spec.name()));
    let p = Params::load(&mut b, &ir_params);
    let r = rows(&mut b, spec, &p);
    let o_base = p.tensor(&mut b, "o", r.batch, r.m0, r.head);
    let do_base = p.tensor(&mut b, "do", r.batch, r.m0, r.head);
    let sq_left = b.sub_u32(p.u32("seqlen_q"), r.m0);
    let zero_accum = b.setp_u64(Cmp::Ne, p.u64("dq_accum"), 0i64);
    let lane16 = b.mul_wide_u32(r.lane, 16u32);
    let o_rb = b.shl_b32(p.u32("o_row_stride"), 1u32);
    let do_rb = b.shl_b32(p.u32("do_row_stride"), 1u32);
    // dvec[(batch * heads + head) * seqlen_q + m0 + row]
    let bh = b.mad_lo_u32(r.batch, r.heads, r.head);
    let drow0 = b.mad_wide_u32(bh, p.u32("seqlen_q"), 0i64);
    let m0_64 = b.cvt_u64_u32(r.m0);
    let drow0 = b.add_s64(drow0, m0_64);
    let dvec = b.cvta_global(p.u64("dvec"));
    let lane0 = b.setp_u32(Cmp::Eq, r.lane, 0u32);
    for_rows(&mut b, spec, &r, sq_left, |b, row| {
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
        let zero_here = b.and_pred(zero_accum, r.chunk_ok);
        let z = b.mov(0.0f32);
        let acc_addr = accum_addr(b, &p, &r, row);
        b.when(zero_here, false, |b| {
            b.st(
                Space::Global,
                Ty::F32,
                Addr::Global(acc_addr, 0),
                &[z, z, z, z],
            );
            b.st(
                Space::Global,
                Ty::F32,
                Addr::Global(acc_addr, 16),
                &[z, z, z, z],
            );
        });
    });
    finish(b, spec, ir_params)
}

/// The entry of a [`Pass::BwdPost`] spec.
pub fn build_post(spec: &KernelSpec) -> Entry {
    assert_eq!(spec.pass, Pass::BwdPost);
    let fmt = spec.dtype.half_fmt();
    let ir_params = abi::ir_params(spec.pass);
    let mut b = Builder::new();
    b.comment(format!("{}: dQ = dq_accum * softmax_scale", spec.name()));
    let p = Params::load(&mut b, &ir_params);
    let r = rows(&mut b, spec, &p);
    let dq_base = p.tensor(&mut b, "dq", r.batch, r.m0, r.head);
    let sq_left = b.sub_u32(p.u32("seqlen_q"), r.m0);
    let scale = p.f32("softmax_scale");
    let lane16 = b.mul_wide_u32(r.lane, 16u32);
    let rb = b.shl_b32(p.u32("dq_row_stride"), 1u32);
    for_rows(&mut b, spec, &r, sq_left, |b, row| {
        let src = accum_addr(b, &p, &r, row);
        let dst = b.mad_wide_u32(row, rb, lane16);
        let dst = b.add_s64(dq_base, dst);
        b.when(r.chunk_ok, false, |b| {
            let lo: [Reg<F32>; 4] = b.ld(
                Space::Global,
                LdCache::Default,
                Ty::F32,
                Addr::Global(src, 0),
            );
            let hi: [Reg<F32>; 4] = b.ld(
                Space::Global,
                LdCache::Default,
                Ty::F32,
                Addr::Global(src, 16),
            );
            let v: Vec<Reg<F32>> = lo.iter().chain(&hi).map(|x| b.mul_f32(*x, scale)).collect();
            let words: Vec<Reg<B32>> = v.chunks(2).map(|c| b.pack(fmt, c[0], c[1])).collect();
            b.st(Space::Global, Ty::B32, Addr::Global(dst, 0), &words);
        });
    });
    finish(b, spec, ir_params)
}

fn finish(b: Builder, spec: &KernelSpec, params: Vec<crate::ptx::Param>) -> Entry {
    let bounds = LaunchBounds {
        max_threads: Some(spec.tiles().threads()),
        min_ctas_per_sm: None,
    };
    b.finish(spec.name(), params, bounds)
}
