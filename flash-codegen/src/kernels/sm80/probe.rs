//! Kernel layer: the mma probe, a one-warp kernel proving the pipeline on a GPU.
//!
//! It copies three 16x16 tiles to swizzled shared memory with `cp.async`, loads them with
//! the layout code's `ldmatrix` recipes and computes, with `mma.sync.m16n8k16`:
//! `c1 = a * bt^T` (B from an `[n][k]` tile, as K in Q K^T) and
//! `c2 = a * v` (B from a `[k][n]` tile via `.trans`, as V in P V). c1, c2: f32 row-major.

use crate::ptx::{
    Addr, Builder, Entry, F32, LaunchBounds, Module, Param, Reg, Special, Target, Ty,
};
use crate::spec::DType;
use crate::tile::frag::{LDM_A, LDM_B_KN_TRANS, LDM_B_NK, c_frag};
use crate::tile::smem::{LdmLanes, SmemTile};

/// Entry name of the probe for `dtype`.
pub fn entry_name(dtype: DType) -> String {
    format!("probe_mma_{}", dtype.name())
}

/// Parameters, in order: `a`, `bt`, `v` `[16][16]` (dtype), `c1`, `c2` `[16][16]` f32.
pub const PARAMS: [&str; 5] = ["a", "bt", "v", "c1", "c2"];

/// Dynamic shared memory bytes the probe needs.
pub const SMEM_BYTES: u32 = 3 * 16 * 128;

/// The probe module for `dtype` (one entry, [`entry_name`]).
pub fn module(dtype: DType) -> Module {
    let mut b = Builder::new();
    let params: Vec<Param> = PARAMS
        .iter()
        .map(|n| Param {
            name: n.to_string(),
            ty: Ty::U64,
        })
        .collect();
    let ptrs: Vec<_> = params
        .iter()
        .map(|p| {
            let raw = b.ld_param(p);
            let crate::ptx::AnyReg::B64(r) = raw else {
                unreachable!()
            };
            b.cvta_global(r)
        })
        .collect();
    let lane = b.special(Special::LaneId);
    let smem = b.smem_base();
    let tiles: Vec<SmemTile> = (0..3)
        .map(|i| SmemTile::new(i * 16 * 128, 16, 64))
        .collect();

    b.comment("-- copy a, bt, v to swizzled shared memory: lane -> (row lane/2, chunk lane%2) --");
    let row = b.shr_u32(lane, 1);
    let chunk = b.and_b32(lane, 1);
    let gofs = b.mul_wide_u32(lane, 16);
    for (tile, src) in tiles.iter().zip(&ptrs) {
        let off = tile.emit_offset(&mut b, row, chunk);
        let dst = b.add_u32(smem, off);
        let g = b.add_s64(*src, gofs);
        b.cp_async(
            crate::ptx::inst::CpSize::B16,
            Addr::Shared(dst, tile.base as i32),
            Addr::Global(g, 0),
            None,
        );
    }
    b.cp_async_commit();
    b.cp_async_wait(0);
    b.bar_sync();

    b.comment("-- fragments through ldmatrix --");
    let a_lanes = LdmLanes::new(&mut b, &LDM_A, lane);
    let a_addr = a_lanes.addr(&mut b, smem, &tiles[0], 0, 0);
    let a = b.ldmatrix::<4>(false, a_addr);
    let nk = LdmLanes::new(&mut b, &LDM_B_NK, lane);
    let bt_addr = nk.addr(&mut b, smem, &tiles[1], 0, 0);
    let bt = b.ldmatrix::<4>(false, bt_addr);
    let kn = LdmLanes::new(&mut b, &LDM_B_KN_TRANS, lane);
    let v_addr = kn.addr(&mut b, smem, &tiles[2], 0, 0);
    let v = b.ldmatrix::<4>(true, v_addr);

    b.comment("-- c = a * b, two n8 tiles each --");
    let fmt = crate::kernels::half_fmt(dtype);
    for (bf, out) in [(bt, ptrs[3]), (v, ptrs[4])] {
        for j in 0..2 {
            let acc: [Reg<F32>; 4] = std::array::from_fn(|_| b.mov(0.0f32));
            b.mma(fmt, acc, a, [bf[2 * j], bf[2 * j + 1]]);
            for (i, r) in acc.iter().enumerate() {
                let c = c_frag(i as u32);
                let row = c.row.emit(&mut b, lane);
                let col = c.col.emit(&mut b, lane);
                let idx = b.mad_lo_u32(row, 16, col);
                let off = b.mul_wide_u32(idx, 4);
                let addr = b.add_s64(out, off);
                b.st(
                    crate::ptx::Space::Global,
                    Ty::F32,
                    Addr::Global(addr, 32 * j as i32),
                    &[*r],
                );
            }
        }
    }
    let entry: Entry = b.finish(
        entry_name(dtype),
        params,
        LaunchBounds {
            max_threads: Some(32),
            min_ctas_per_sm: None,
            exact_threads: false,
        },
    );
    Module {
        target: Target::Sm80,
        entries: vec![entry],
    }
}
