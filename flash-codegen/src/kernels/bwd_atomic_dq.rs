//! Kernel layer: the backward main pass's atomic dQ (when `dq_accum` is given): dS^T of
//! each query block goes through shared memory, and every warp adds its share of
//! dQ += dS K into the f32 accumulator with `red.global.add.f32`.

use super::params::Params;
use super::softmax::{AccTiles, zeros};
use super::warp::Warp;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, HalfFmt, Pred, Reg, Space, Ty};
use crate::spec::KernelSpec;
use crate::tile::frag::{ACCUM_TILE_FLOATS, AccumGrid, LDM_B_NK, accum_slot};
use crate::tile::smem::{ROW_BYTES, SmemTile, ldm_lane_offset_emit};

/// A warp's share of the atomic dQ: (query-row tile, column group, ldmatrix lane offset).
pub type DqWarp = (Reg<B32>, Option<Reg<B32>>, Reg<B32>);

/// The atomic dQ of one main-pass kernel: what stays fixed across query blocks.
pub struct AtomicDq<'a> {
    /// Shared address of the dynamic shared memory (K sits at `k_tile.base` from it).
    pub smem: Reg<B32>,
    /// The dS^T tile's layout (its stage's address is given per call).
    pub ds_tile: &'a SmemTile,
    /// K `[block_n][d]`.
    pub k_tile: &'a SmemTile,
    /// `(batch, heads)`: the accumulator's batch index and total query heads.
    pub batch_heads: (Reg<B32>, Reg<B32>),
    /// The warp's (query-row tile, column group, ldmatrix lane offset), from [`dq_warp`];
    /// `None`: computed at each use (to keep registers free in between).
    pub warp: Option<DqWarp>,
}

impl AtomicDq<'_> {
    /// When `run` holds (warp-uniform): dQ += dS K for the query block at `m0` of query
    /// head `head`, its dS^T at shared address `ds_smem` (see [`accumulate_dq`]).
    #[allow(clippy::too_many_arguments)]
    pub fn emit_if(
        &self,
        b: &mut Builder,
        spec: &KernelSpec,
        p: &Params,
        w: &Warp,
        run: Reg<Pred>,
        ds_smem: Reg<B32>,
        (head, m0): (Reg<B32>, Reg<B32>),
    ) {
        let skip = b.label();
        b.bra_if(run, true, skip, true);
        let (qw, grp, lane) = self.warp.unwrap_or_else(|| dq_warp(b, spec, w));
        let (batch, heads) = self.batch_heads;
        accumulate_dq(
            b,
            spec,
            p,
            w,
            (self.smem, ds_smem, self.ds_tile, self.k_tile, lane),
            (qw, grp),
            (batch, head, heads, m0),
        );
        b.place(skip);
    }
}

/// The warp's share of the atomic dQ: (query-row tile qw, column group grp, ldmatrix lane
/// offset of its dS rows); the warps split into `block_m / 16` row tiles times column
/// groups (one group: qw = warp, grp = None).
pub fn dq_warp(b: &mut Builder, spec: &KernelSpec, w: &Warp) -> DqWarp {
    let t = spec.tiles();
    let row_tiles = t.block_m / 16;
    let (qw, grp) = if t.warps > row_tiles {
        (
            b.rem_u32(w.warp, row_tiles),
            Some(b.div_u32(w.warp, row_tiles)),
        )
    } else {
        (w.warp, None)
    };
    let two_qw = b.shl_b32(qw, 1u32);
    (qw, grp, ldm_lane_offset_emit(b, &LDM_B_NK, w.lane, two_qw))
}

/// Where the n-tiles of [`store_ds`] start: a compile-time n-tile, or a run-time chunk.
#[derive(Clone, Copy)]
pub enum Cols {
    /// N-tile `nt0` (columns `8 nt0..`).
    Fixed(usize),
    /// The 8-column chunk in a register (columns `8 chunk..`).
    At(Reg<B32>),
}

/// Writes accumulator tiles (this thread's fragments, converted to `fmt`; rows = the
/// warp's rows, columns from `cols`) into a `[rows][cols]` tile: dS^T, or P^T.
pub fn store_ds(
    b: &mut Builder,
    fmt: HalfFmt,
    w: &Warp,
    ds: &AccTiles,
    smem: Reg<B32>,
    ds_tile: &SmemTile,
    cols: Cols,
) {
    let col_bytes = b.shl_b32(w.t2, 1u32);
    for (r, &row) in w.rows.iter().enumerate() {
        let (mt, h) = (r / 2, r % 2);
        for (nt, frag) in ds[mt].iter().enumerate() {
            let chunk = match cols {
                Cols::Fixed(nt0) => b.mov((nt0 + nt) as u32),
                Cols::At(c) => b.add_u32(c, nt as u32),
            };
            let off = ds_tile.emit_offset(b, row, chunk);
            let off = b.add_u32(off, col_bytes);
            let addr = b.add_u32(smem, off);
            let word = b.pack(fmt, frag[2 * h], frag[2 * h + 1]);
            b.st(
                Space::Shared,
                Ty::B32,
                Addr::Shared(addr, ds_tile.base as i32),
                &[word],
            );
        }
    }
}

/// dQ += dS K over the block's keys (the caller orders the dS^T stores before it, and its
/// reads before the tile is stored again): warp (qw, grp) reads query rows 16 qw.. of the
/// dS^T tile at shared address `ds_smem` back transposed (ldmatrix.trans), multiplies by
/// its group's 64-column panels of
/// K and adds the result into dq_accum (f32 tiles in fragment order, see
/// [`crate::tile::frag::ACCUM_TILE_FLOATS`]) with red.global.add.f32: one 128-byte line per
/// warp-wide instruction.
#[allow(clippy::type_complexity)]
fn accumulate_dq(
    b: &mut Builder,
    spec: &KernelSpec,
    p: &Params,
    w: &Warp,
    (smem, ds_smem, ds_tile, k_tile, dq_lane): (Reg<B32>, Reg<B32>, &SmemTile, &SmemTile, Reg<B32>),
    (qw, grp): (Reg<B32>, Option<Reg<B32>>),
    (batch, head, heads, m0): (Reg<B32>, Reg<B32>, Reg<B32>, Reg<B32>),
) {
    let fmt: HalfFmt = spec.dtype.half_fmt();
    let t = spec.tiles();
    let d = spec.head_dim;
    let groups = t.warps / (t.block_m / 16);
    let panels = d.div_ceil(64) / groups;
    b.comment("-- dQ += dS K (atomic) --");
    // a[kk]: dS rows (the warp's 16 queries) x keys 16kk..16kk+16
    let ds_base = b.add_u32(ds_smem, dq_lane);
    let a: Vec<[Reg<B32>; 4]> = (0..t.block_n / 16)
        .map(|kk| {
            b.ldmatrix::<4>(
                true,
                Addr::Shared(ds_base, (ds_tile.base + 16 * kk * ROW_BYTES) as i32),
            )
        })
        .collect();
    let head_dim = p.u32("head_dim");
    let accum = b.cvta_global(p.u64("dq_accum"));
    // the group's first K panel and first column (compile-time 0 with one group)
    let (k_smem, col0) = match grp {
        Some(grp) => (
            b.mad_lo_u32(grp, panels * k_tile.rows * ROW_BYTES, smem),
            Some(b.mul_lo_u32(grp, 64 * panels)),
        ),
        None => (smem, None),
    };
    // the warp's 16 query rows are one row of accumulator tiles (frag::ACCUM_TILE_FLOATS)
    let q_row0 = b.shl_b32(qw, 4u32);
    let q_row0 = b.add_u32(q_row0, m0);
    let tile_ok = b.setp_u32(Cmp::Lt, q_row0, p.u32("seqlen_q"));
    let grid = AccumGrid::new(b, p.u32("seqlen_q"), head_dim);
    let bh = b.mad_lo_u32(batch, heads, head);
    let c8 = col0.map(|c0| b.shr_u32(c0, 3u32));
    let tile = grid.tile(b, bh, q_row0, c8);
    let lane_bytes = b.mul_wide_u32(w.lane, 4u32);
    let off = b.mad_wide_u32(tile, 4 * ACCUM_TILE_FLOATS, lane_bytes);
    let base = b.add_s64(accum, off);
    for panel in 0..panels {
        let cols = (d - 64 * panel).min(64);
        let acc = zeros(b, 1, (cols / 8) as usize);
        let tile = SmemTile::new(
            k_tile.base + panel * k_tile.rows * ROW_BYTES,
            k_tile.rows,
            64,
        );
        w.mma_a_b(b, fmt, &acc, std::slice::from_ref(&a), (&tile, k_smem));
        // ptxas wraps every predicated red in its own BSSY/BRA/BSYNC (32 per d128 step,
        // 3% of the cycles stalled on branch resolution, ncu session 4); the predicates are
        // warp-uniform, so one uniform branch picks unpredicated reds for whole tiles
        let panel_end = 64 * panel + cols;
        let panel_end = match col0 {
            Some(c0) => b.add_u32(c0, panel_end),
            None => b.mov(panel_end),
        };
        let cols_ok = b.setp_u32(Cmp::Le, panel_end, head_dim);
        let whole = b.and_pred(tile_ok, cols_ok);
        let (edge, done) = (b.label(), b.label());
        b.bra_if(whole, true, edge, true);
        red_tiles(b, &acc[0], base, panel, None);
        b.bra(done, true);
        b.place(edge);
        let edge = Edge {
            tile_ok,
            col0,
            head_dim,
        };
        red_tiles(b, &acc[0], base, panel, Some(&edge));
        b.place(done);
    }
}

/// What an edge tile's reds are predicated on.
struct Edge {
    /// The warp's query tile starts below seqlen_q.
    tile_ok: Reg<Pred>,
    /// The group's first column (`None`: 0).
    col0: Option<Reg<B32>>,
    /// The problem's head dim.
    head_dim: Reg<B32>,
}

/// `red.global.add.f32` of the n-tiles `frags` (columns `64 panel..` of the warp's group)
/// at their fragment-ordered slots from `base`; with an [`Edge`] each n-tile is
/// predicated on its query tile and columns being inside the problem.
fn red_tiles(
    b: &mut Builder,
    frags: &[[Reg<F32>; 4]],
    base: Reg<B64>,
    panel: u32,
    edge: Option<&Edge>,
) {
    let tile_bytes = 4 * ACCUM_TILE_FLOATS;
    for (nt, frag) in frags.iter().enumerate() {
        let col = 64 * panel + 8 * nt as u32;
        let ok = edge.map(|e| {
            let col_ok = match e.col0 {
                Some(c0) => {
                    let col_abs = b.add_u32(c0, col);
                    b.setp_u32(Cmp::Lt, col_abs, e.head_dim)
                }
                None => b.setp_u32(Cmp::Lt, col, e.head_dim),
            };
            b.and_pred(e.tile_ok, col_ok)
        });
        let tile_off = (col / 8) * tile_bytes;
        for (reg, &v) in frag.iter().enumerate() {
            let slot = accum_slot(reg as u32, 0);
            let addr = Addr::Global(base, (tile_off + 4 * slot) as i32);
            match ok {
                Some(ok) => b.when(ok, false, |b| b.red_add_f32(addr, v)),
                None => b.red_add_f32(addr, v),
            }
        }
    }
}
