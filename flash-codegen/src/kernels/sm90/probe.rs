//! Kernel layer, sm_90a: the Hopper probe, one warpgroup proving every piece the
//! warp-specialised forward stands on, against host references (tests/gpu_probe_sm90.rs):
//!
//! 1. `mbarrier.init` by one thread, `fence.mbarrier_init`, `bar.sync`;
//! 2. three TMA loads of 64 x 64 boxes of 4D `[b, s, h, d]` maps (Q at `sq0`, K and V at
//!    `sk0`, heads `h`, batch `b`) completing on the barrier (`expect_tx` = 3 boxes), waited
//!    by parity 0;
//! 3. `S = Q K^T`: four SS `wgmma` k-steps from K-major descriptors (`tile::desc`), stored
//!    as f32 `[64][64]` from the accumulator layout;
//! 4. `O = P V` with P = S rounded to the dtype: four RS k-steps (A from registers) against
//!    the MN-major descriptor of V;
//! 5. O to the dtype, `stmatrix` into a swizzled tile, `fence.proxy.async`, a TMA store at
//!    Q's coordinates (rows past the tensor are not written);
//! 6. a second load on the same barrier (parity 1) at `s1`, whose rows past the tensor
//!    come back zero-filled while the barrier still counts the whole box; its raw
//!    shared-memory image is copied out (8 KiB) so the host checks the 128-byte swizzle.

use super::EntryParams;
use crate::ptx::inst::ScaleD;
use crate::ptx::{
    Addr, B32, Builder, Cmp, Entry, LaunchBounds, LdCache, Module, Operand, Reg, Space, Special,
    Target, Ty,
};
use crate::spec::DType;
use crate::tile::acc::AccTile;
use crate::tile::desc::{Major, WgmmaDesc};
use crate::tile::frag::LDM_A;
use crate::tile::smem::{LdmLanes, ROW_BYTES, SmemTile};

/// Entry name of the probe for `dtype`.
pub fn entry_name(dtype: DType) -> String {
    format!("probe_sm90_{}", dtype.name())
}

/// Tensor-map parameters, in order (each `.param .align 64 .b8 [128]`): q, k, v (loads)
/// and o (the store); all 4D `{d, h, s, b}` maps with 64 x 64 boxes `{64, 1, 64, 1}`.
pub const MAPS: [&str; 4] = ["tm_q", "tm_k", "tm_v", "tm_o"];

/// Scalar parameters after the maps: `s_out` (u64, f32 `[64][64]`), `img_out` (u64, 8192
/// bytes), then u32 `h`, `b`, `sq0`, `sk0`, `s1`.
pub const SCALARS: [(&str, Ty); 7] = [
    ("s_out", Ty::U64),
    ("img_out", Ty::U64),
    ("h", Ty::U32),
    ("b", Ty::U32),
    ("sq0", Ty::U32),
    ("sk0", Ty::U32),
    ("s1", Ty::U32),
];

/// Box rows and columns (64 sequence positions of one head, d = 64).
pub const BOX: u32 = 64;

/// Bytes of one box (16-bit elements).
pub const BOX_BYTES: u32 = BOX * BOX * 2;

/// Shared memory: the barrier at 0, then Q, K, V, O and the second load's image, each
/// 1024-byte aligned.
const TILES: [u32; 5] = [
    1024,
    1024 + BOX_BYTES,
    1024 + 2 * BOX_BYTES,
    1024 + 3 * BOX_BYTES,
    1024 + 4 * BOX_BYTES,
];

/// Dynamic shared memory bytes the probe needs.
pub const SMEM_BYTES: u32 = 1024 + 5 * BOX_BYTES;

/// Spins of each mbarrier wait before the probe fails naming it (a wrong byte count or
/// parity fails the test instead of hanging the GPU).
pub const WAIT_SPINS: u32 = 1 << 20;

/// Threads: one warpgroup.
pub const THREADS: u32 = 128;

fn tile(i: usize) -> SmemTile {
    SmemTile::new(TILES[i], BOX, BOX)
}

/// The probe module for `dtype` (one entry, [`entry_name`]).
pub fn module(dtype: DType) -> Module {
    let fmt = crate::kernels::half_fmt(dtype);
    let mut b = Builder::new();
    b.bound_waits(WAIT_SPINS);
    let ep = EntryParams::load(&mut b, &MAPS, &SCALARS);
    let tm = ep.maps.clone();
    let (s_out, img_out) = (ep.u64(0), ep.u64(1));
    let u: Vec<Reg<B32>> = (2..7).map(|i| ep.u32(i)).collect();
    let (h, bi, sq0, sk0, s1) = (u[0], u[1], u[2], u[3], u[4]);
    let (s_out, img_out) = (b.cvta_global(s_out), b.cvta_global(img_out));
    let smem = b.smem_base();
    let tid = b.special(Special::TidX);
    let bar = Addr::Shared(smem, 0);
    let first = b.setp_u32(Cmp::Eq, tid, 0u32);
    let at = |i: usize| Addr::Shared(smem, TILES[i] as i32);
    let coords =
        |s: Reg<B32>| -> Vec<Operand<B32>> { vec![Operand::Imm(0), h.into(), s.into(), bi.into()] };

    b.comment("-- 1, 2: barrier, three TMA loads, wait for parity 0 --");
    b.when(first, false, |b| b.mbarrier_init(bar, 1));
    b.fence_mbarrier_init();
    b.bar_sync();
    b.when(first, false, |b| {
        b.mbarrier_arrive_expect_tx(bar, 3 * BOX_BYTES);
        b.tma_load(at(0), tm[0], coords(sq0), bar);
        b.tma_load(at(1), tm[1], coords(sk0), bar);
        b.tma_load(at(2), tm[2], coords(sk0), bar);
    });
    b.mbarrier_wait(bar, 0u32, "qkv");

    b.comment("-- 3: S = Q K^T (SS, K-major) --");
    let (q, k) = (
        WgmmaDesc::new(tile(0), Major::K),
        WgmmaDesc::new(tile(1), Major::K),
    );
    let (q0, k0) = (q.emit(&mut b, smem), k.emit(&mut b, smem));
    let s_acc = AccTile::for_wgmma(&mut b, BOX);
    let s = s_acc.wgmma_regs();
    b.wgmma_fence();
    for kk in 0..q.k_steps() {
        let (qd, kd) = (q.emit_kstep(&mut b, q0, kk), k.emit_kstep(&mut b, k0, kk));
        b.wgmma_ss(fmt, &s, qd, false, kd, false, ScaleD::Imm(kk > 0));
    }
    b.wgmma_commit();
    b.wgmma_wait(0);
    // this warp's rows 16w.. of S: thread row r, n-tile nt -> (16w + g + 8r, 8nt + 2t)
    let lane = b.special(Special::LaneId);
    let w = b.shr_u32(tid, 5);
    let g = AccTile::lane_row(&mut b, lane);
    let col = AccTile::lane_col(&mut b, lane);
    let row = b.mad_lo_u32(w, 16u32, g);
    let idx = b.mad_lo_u32(row, BOX, col);
    let off = b.mul_wide_u32(idx, 4);
    let base = b.add_s64(s_out, off);
    for nt in 0..s_acc.n_tiles() {
        for r in 0..s_acc.rows() {
            let o = 4 * (8 * nt as i32 + 8 * BOX as i32 * r as i32);
            b.st(
                Space::Global,
                Ty::F32,
                Addr::Global(base, o),
                &s_acc.pair(r, nt),
            );
        }
    }

    b.comment("-- 4: O = P V (RS, V MN-major) --");
    let v = WgmmaDesc::new(tile(2), Major::Mn);
    let v0 = v.emit(&mut b, smem);
    let o_acc = AccTile::for_wgmma(&mut b, BOX);
    let o = o_acc.wgmma_regs();
    let p = s_acc.as_a(&mut b, fmt, 0);
    b.wgmma_fence();
    for (kk, a) in p.iter().enumerate() {
        let vd = v.emit_kstep(&mut b, v0, kk as u32);
        b.wgmma_rs(fmt, &o, *a, vd, true, ScaleD::Imm(kk > 0));
    }
    b.wgmma_commit();
    b.wgmma_wait(0);

    b.comment("-- 5: O -> stmatrix into the swizzled tile -> TMA store --");
    // stmatrix is ldmatrix's inverse: O's A fragments (as P's) go where ldmatrix would
    // read them, this warp's 16 rows at 16w of the tile.
    let lanes = LdmLanes::new(&mut b, &LDM_A, lane);
    let smem_w = b.mad_lo_u32(w, 16 * ROW_BYTES, smem);
    for (kk, f) in o_acc.as_a(&mut b, fmt, 0).into_iter().enumerate() {
        let addr = lanes.addr(&mut b, smem_w, &tile(3), 0, 2 * kk as u32);
        b.stmatrix(false, addr, f);
    }
    b.fence_proxy_async();
    b.bar_sync();
    b.when(first, false, |b| b.tma_store(tm[3], coords(sq0), at(3)));
    b.bulk_commit();
    b.bulk_wait(0, true);

    b.comment("-- 6: a second phase (parity 1): a box past the tensor's end, zero-filled --");
    b.when(first, false, |b| {
        b.mbarrier_arrive_expect_tx(bar, BOX_BYTES);
        b.tma_load(at(4), tm[0], coords(s1), bar);
    });
    b.mbarrier_wait(bar, 1u32, "second load");
    let chunk0 = b.shl_b32(tid, 4u32);
    let src = b.add_u32(smem, chunk0);
    let gofs = b.mul_wide_u32(tid, 16);
    let dst = b.add_s64(img_out, gofs);
    for c in 0..(BOX_BYTES / (16 * THREADS)) as i32 {
        let x: [Reg<B32>; 4] = b.ld(
            Space::Shared,
            LdCache::Default,
            Ty::B32,
            Addr::Shared(src, TILES[4] as i32 + 16 * THREADS as i32 * c),
        );
        b.st(
            Space::Global,
            Ty::B32,
            Addr::Global(dst, 16 * THREADS as i32 * c),
            &x,
        );
    }

    let entry: Entry = b.finish(
        entry_name(dtype),
        ep.params,
        LaunchBounds {
            max_threads: Some(THREADS),
            min_ctas_per_sm: Some(1),
            exact_threads: false,
        },
    );
    Module {
        target: Target::Sm90a,
        entries: vec![entry],
    }
}
