//! Kernel layer: FlashAttention-2 forward (Dao 2023, Algorithm 1) on the sm_80 path.
//!
//! One CTA per (query block, head, batch); each warp owns `block_m / warps` query rows.
//! K/V blocks stream through `stages` shared-memory buffers with `cp.async` (block j+1 is
//! in flight while block j is computed). Per block: S = Q K^T (mma.sync, f32), mask,
//! online softmax, O += P V with P converted in registers. At the end O /= l and the LSE
//! is written.

use super::mask::KeyMask;
use super::probe::half_fmt;
use super::softmax::{AccTiles, OnlineSoftmax, p_as_a, zeros};
use super::params::Params;
use crate::abi;
use crate::ptx::{
    Addr, B32, B64, Builder, Cmp, Entry, F32, LaunchBounds, Reg, Space, Special, Ty,
};
use crate::spec::KernelSpec;
use crate::tile::copy::TileCopy;
use crate::tile::frag::{LDM_A, LDM_B_KN_TRANS, LDM_B_NK, c_frag};
use crate::tile::smem::{LdmLanes, SmemTile};

pub fn build(spec: &KernelSpec) -> Entry {
    let t = spec.tiles();
    let (d, dp) = (spec.head_dim, spec.smem_head_dim());
    let (bm, bn, threads) = (t.block_m, t.block_n, t.threads());
    let m_tiles = (bm / t.warps / 16) as usize;
    assert!(
        m_tiles >= 1 && bm % (16 * t.warps) == 0,
        "generator bug: block_m {bm}"
    );
    let fmt = half_fmt(spec.dtype);
    let ir_params = abi::ir_params(spec.pass);
    let mut b = Builder::new();

    b.comment(format!(
        "{}: block {bm}x{bn}, {} warps, {} stages, d {d}, smem {} bytes",
        spec.name(),
        t.warps,
        t.stages,
        spec.smem_bytes()
    ));
    let p = Params::load(&mut b, &ir_params);
    let (seqlen_q, seqlen_k, head_dim) = (p.u32("seqlen_q"), p.u32("seqlen_k"), p.u32("head_dim"));
    let scale_log2 = p.f32("scale_log2");
    let tid = b.special(Special::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    let m_block = b.special(Special::CtaIdX);
    let head = b.special(Special::CtaIdY);
    let batch = b.special(Special::CtaIdZ);
    let m0 = b.mul_lo_u32(m_block, bm);
    let kv_head = b.div_u32(head, p.u32("heads_per_kv"));
    let zero = b.mov(0u32);
    let q_base = p.tensor(&mut b, "q", batch, m0, head);
    let k_base = p.tensor(&mut b, "k", batch, zero, kv_head);
    let v_base = p.tensor(&mut b, "v", batch, zero, kv_head);
    let o_base = p.tensor(&mut b, "o", batch, m0, head);

    b.comment("-- shared memory: Q tile, then `stages` K tiles, then `stages` V tiles --");
    let smem = b.smem_base();
    let q_tile = SmemTile::new(0, bm, dp);
    let kv_bytes = SmemTile::new(0, bn, dp).bytes();
    let k_tile = |s: u32| SmemTile::new(q_tile.bytes() + s * kv_bytes, bn, dp);
    let v_tile = |s: u32| SmemTile::new(q_tile.bytes() + (t.stages + s) * kv_bytes, bn, dp);
    assert_eq!(
        v_tile(t.stages - 1).base + kv_bytes,
        spec.smem_bytes(),
        "generator bug: smem size"
    );

    b.comment("-- number of key blocks: all of them, or up to the causal diagonal --");
    let n_blocks = b.add_u32(seqlen_k, bn - 1);
    let n_blocks = b.div_u32(n_blocks, bn);
    let diag = b.sub_s32(seqlen_k, seqlen_q);
    let diag = b.add_s32(diag, m0); // last key the first query row of the block sees
    let n_blocks = if spec.causal {
        let lim = b.add_s32(diag, (bm + bn - 1) as i32); // ceil((diag + block_m) / block_n)
        let lim = b.max_s32(lim, 0i32);
        let lim = b.div_u32(lim, bn);
        b.min_u32(n_blocks, lim)
    } else {
        n_blocks
    };

    b.comment("-- issue Q and the first K/V block --");
    let q_copy = TileCopy::new(
        &mut b,
        &q_tile,
        d,
        threads,
        tid,
        p.u32("q_row_stride"),
        head_dim,
    );
    let k_copy = TileCopy::new(
        &mut b,
        &k_tile(0),
        d,
        threads,
        tid,
        p.u32("k_row_stride"),
        head_dim,
    );
    let v_copy = TileCopy::new(
        &mut b,
        &v_tile(0),
        d,
        threads,
        tid,
        p.u32("v_row_stride"),
        head_dim,
    );
    let q_rows = b.sub_u32(seqlen_q, m0);
    q_copy.issue(&mut b, smem, q_tile.base, q_base, q_rows);
    let has_blocks = b.setp_u32(Cmp::Gt, n_blocks, 0u32);
    let no_first = b.label();
    b.bra_if(has_blocks, true, no_first, true);
    k_copy.issue(&mut b, smem, k_tile(0).base, k_base, seqlen_k);
    v_copy.issue(&mut b, smem, v_tile(0).base, v_base, seqlen_k);
    b.place(no_first);
    b.cp_async_commit();

    b.comment("-- per-thread fragment coordinates --");
    let t2 = c_frag(0).col.emit(&mut b, lane);
    let g = c_frag(0).row.emit(&mut b, lane);
    let warp_row = b.mul_lo_u32(warp, 16 * m_tiles as u32);
    let rows: Vec<Reg<B32>> = (0..m_tiles as u32)
        .flat_map(|mt| [0u32, 8].map(|h| (mt, h)))
        .map(|(mt, h)| {
            let r = b.add_u32(warp_row, g);
            b.add_u32(r, 16 * mt + h) // row within the block
        })
        .collect();
    let abs_rows: Vec<Reg<B32>> = rows.iter().map(|&r| b.add_u32(r, m0)).collect();
    let mask = KeyMask::new(&mut b, spec.causal, &abs_rows, t2, seqlen_q, seqlen_k);
    let a_lanes = LdmLanes::new(&mut b, &LDM_A, lane);
    let k_lanes = LdmLanes::new(&mut b, &LDM_B_NK, lane);
    let v_lanes = LdmLanes::new(&mut b, &LDM_B_KN_TRANS, lane);

    let o: AccTiles = zeros(&mut b, m_tiles, (d / 8) as usize);
    let mut softmax = OnlineSoftmax::new(&mut b, m_tiles, scale_log2);
    let k_step = b.mul_wide_u32(p.u32("k_row_stride"), bn);
    let k_step = b.add_s64(k_step, k_step);
    let v_step = b.mul_wide_u32(p.u32("v_row_stride"), bn);
    let v_step = b.add_s64(v_step, v_step);
    let j = b.mov(0u32);
    let k_next = b.add_s64(k_base, k_step);
    let v_next = b.add_s64(v_base, v_step);

    b.comment("== main loop over key/value blocks ==");
    let top = b.label();
    let done = b.label();
    b.place(top);
    let more = b.setp_u32(Cmp::Lt, j, n_blocks);
    b.bra_if(more, true, done, true);
    let n0 = b.mul_lo_u32(j, bn);
    let stage = b.and_b32(j, t.stages - 1);

    b.comment("-- prefetch block j+1 into the other stage --");
    let j1 = b.add_u32(j, 1u32);
    let has_next = b.setp_u32(Cmp::Lt, j1, n_blocks);
    let no_next = b.label();
    b.bra_if(has_next, true, no_next, true);
    let next_stage = b.and_b32(j1, t.stages - 1);
    let stage_off = b.mul_lo_u32(next_stage, kv_bytes);
    let next_smem = b.add_u32(smem, stage_off);
    let n1 = b.add_u32(n0, bn);
    let rows_left = b.sub_u32(seqlen_k, n1);
    k_copy.issue(&mut b, next_smem, k_tile(0).base, k_next, rows_left);
    v_copy.issue(&mut b, next_smem, v_tile(0).base, v_next, rows_left);
    b.place(no_next);
    b.cp_async_commit();
    b.cp_async_wait(1);
    b.bar_sync();

    b.comment("-- S = Q K^T --");
    let stage_off = b.mul_lo_u32(stage, kv_bytes);
    let kv_smem = b.add_u32(smem, stage_off);
    let mut s: AccTiles = zeros(&mut b, m_tiles, (bn / 8) as usize);
    for kk in 0..d / 16 {
        let a: Vec<[Reg<B32>; 4]> = (0..m_tiles)
            .map(|mt| {
                let row0 = warp_row_const(mt);
                let addr = warp_addr(&mut b, &a_lanes, smem, &q_tile, warp_row, row0, 2 * kk);
                b.ldmatrix::<4>(false, addr)
            })
            .collect();
        for np in 0..bn / 16 {
            let addr = k_lanes.addr(&mut b, kv_smem, &k_tile(0), 16 * np, 2 * kk);
            let kf = b.ldmatrix::<4>(false, addr);
            for (mt, a_mt) in a.iter().enumerate() {
                b.mma(fmt, s[mt][2 * np as usize], *a_mt, [kf[0], kf[1]]);
                b.mma(fmt, s[mt][2 * np as usize + 1], *a_mt, [kf[2], kf[3]]);
            }
        }
    }

    b.comment("-- mask: only blocks crossing the sequence end or the causal diagonal --");
    let end = b.add_u32(n0, bn);
    let needs_mask = b.setp_u32(Cmp::Gt, end, seqlen_k);
    let needs_mask = if spec.causal {
        let last = b.add_s32(n0, bn as i32 - 1);
        let crosses = b.setp_s32(Cmp::Gt, last, diag);
        b.or_pred(needs_mask, crosses)
    } else {
        needs_mask
    };
    let unmasked = b.label();
    b.bra_if(needs_mask, true, unmasked, true);
    mask.apply(&mut b, &s, n0);
    b.place(unmasked);

    b.comment("-- online softmax: m_i, l_i, P = exp2(S * scale_log2 - m_i), O *= alpha --");
    softmax.step(&mut b, &mut s, &o);

    b.comment("-- O += P V --");
    for (mt, s_mt) in s.iter().enumerate() {
        let pa = p_as_a(&mut b, fmt, s_mt);
        for (kk, a) in pa.iter().enumerate() {
            for dp2 in 0..d / 16 {
                let addr = v_lanes.addr(&mut b, kv_smem, &v_tile(0), 16 * kk as u32, 2 * dp2);
                let vf = b.ldmatrix::<4>(true, addr);
                b.mma(fmt, o[mt][2 * dp2 as usize], *a, [vf[0], vf[1]]);
                b.mma(fmt, o[mt][2 * dp2 as usize + 1], *a, [vf[2], vf[3]]);
            }
        }
    }
    b.bar_sync();
    let nk = b.add_s64(k_next, k_step);
    b.assign(k_next, nk);
    let nv = b.add_s64(v_next, v_step);
    b.assign(v_next, nv);
    let nj = b.add_u32(j, 1u32);
    b.assign(j, nj);
    b.bra(top, true);
    b.place(done);
    b.cp_async_wait(0);

    b.comment("-- epilogue: O /= l_i, write O and LSE --");
    let lse = softmax.finish(&mut b, &o);
    store_o(&mut b, spec, &p, &o, &rows, t2, o_base, q_rows, head_dim);
    store_lse(&mut b, &p, &lse, &rows, t2, (batch, head, m0), q_rows);
    let bounds = LaunchBounds {
        max_threads: Some(threads),
        min_ctas_per_sm: None,
    };
    b.finish(spec.name(), ir_params, bounds)
}

/// First row (within the warp's rows) of m-tile `mt`.
fn warp_row_const(mt: usize) -> u32 {
    16 * mt as u32
}

/// ldmatrix address into a tile at the warp's row offset (a run-time multiple of 16).
fn warp_addr(
    b: &mut Builder,
    lanes: &LdmLanes,
    smem: Reg<B32>,
    tile: &SmemTile,
    warp_row: Reg<B32>,
    row0: u32,
    chunk0: u32,
) -> Addr {
    let wr = b.mul_lo_u32(warp_row, crate::tile::smem::ROW_BYTES);
    let base = b.add_u32(smem, wr);
    lanes.addr(b, base, tile, row0, chunk0)
}

/// Stores O (converted to the element type) for valid rows and head-dim columns.
#[allow(clippy::too_many_arguments)]
fn store_o(
    b: &mut Builder,
    spec: &KernelSpec,
    p: &Params,
    o: &AccTiles,
    rows: &[Reg<B32>],
    t2: Reg<B32>,
    o_base: Reg<B64>,
    q_rows: Reg<B32>,
    head_dim: Reg<B32>,
) {
    let fmt = half_fmt(spec.dtype);
    let row_bytes = b.shl_b32(p.u32("o_row_stride"), 1u32);
    let col_bytes = b.shl_b32(t2, 1u32);
    let col_bytes = b.cvt_u64_u32(col_bytes);
    for (r, &row) in rows.iter().enumerate() {
        let (mt, h) = (r / 2, r % 2);
        let row_ok = b.setp_s32(Cmp::Lt, row, q_rows);
        let addr = b.mad_wide_u32(row, row_bytes, col_bytes);
        let addr = b.add_s64(o_base, addr);
        for (dt, frag) in o[mt].iter().enumerate() {
            let col_ok = b.setp_u32(Cmp::Lt, 8 * dt as u32, head_dim);
            let ok = b.and_pred(row_ok, col_ok);
            let packed = b.pack(fmt, frag[2 * h], frag[2 * h + 1]);
            b.when(ok, false, |b| {
                b.st(
                    Space::Global,
                    Ty::B32,
                    Addr::Global(addr, 16 * dt as i32),
                    &[packed],
                )
            });
        }
    }
}

/// Lane t = 0 of each quad writes its rows' LSE, when the lse pointer is non-null.
fn store_lse(
    b: &mut Builder,
    p: &Params,
    lse: &[Reg<F32>],
    rows: &[Reg<B32>],
    t2: Reg<B32>,
    (batch, head, m0): (Reg<B32>, Reg<B32>, Reg<B32>),
    q_rows: Reg<B32>,
) {
    let skip = b.label();
    let ptr = p.u64("lse");
    let null = b.setp_u64(Cmp::Eq, ptr, 0i64);
    let other_lane = b.setp_u32(Cmp::Ne, t2, 0u32);
    let skip_all = b.or_pred(null, other_lane);
    b.bra_if(skip_all, false, skip, false);
    b.comment("lse[batch, head, m0 + row], f32");
    let bh = b.mad_lo_u32(batch, p.u32("heads"), head);
    let row0 = b.mul_wide_u32(bh, p.u32("seqlen_q"));
    let m064 = b.cvt_u64_u32(m0);
    let row0 = b.add_s64(row0, m064);
    let bytes = b.shl_b64(row0, 2);
    let base = b.cvta_global(ptr);
    let base = b.add_s64(base, bytes);
    for (r, &row) in rows.iter().enumerate() {
        let row_ok = b.setp_s32(Cmp::Lt, row, q_rows);
        let addr = b.mad_wide_u32(row, 4u32, base);
        b.when(row_ok, false, |b| {
            b.st(Space::Global, Ty::F32, Addr::Global(addr, 0), &[lse[r]])
        });
    }
    b.place(skip);
}
