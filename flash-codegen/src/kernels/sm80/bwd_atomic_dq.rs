//! Kernel layer: the backward main pass's atomic dQ (when `dq_accum` is given): dS^T of
//! each query block goes through shared memory, and every warp adds its share of
//! dQ += dS K into the f32 accumulator with `red.global.add.f32`.

use super::warp::Warp;
use crate::abi::{DQ_ACCUM, HEAD_DIM};
use crate::kernels::half_fmt;
use crate::kernels::params::Params;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, HalfFmt, Pred, Reg};
use crate::spec::KernelPlan;
use crate::tile::acc::AccTile;
use crate::tile::frag::{ACCUM_TILE_FLOATS, LDM_B_NK, accum_slot};
use crate::tile::smem::{ROW_BYTES, SmemTile, ldm_lane_offset_emit};

/// A warp's share of the atomic dQ (see [`dq_split`]).
#[derive(Clone, Debug)]
pub struct DqWarp {
    /// The warp's row tile (`16 m_tiles` queries).
    qw: Reg<B32>,
    /// Its column group (`None`: one group).
    grp: Option<Reg<B32>>,
    /// Per m-tile: the ldmatrix.trans lane offset of its dS rows in the dS^T tile.
    lanes: Vec<Reg<B32>>,
}

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
    /// The (sequence's) query count.
    pub seqlen_q: Reg<B32>,
    /// The warp's (query-row tile, column group, ldmatrix lane offset), from [`dq_warp`];
    /// `None`: computed at each use (to keep registers free in between).
    pub warp: Option<DqWarp>,
}

impl AtomicDq<'_> {
    /// When `run` holds (warp-uniform): dQ += dS K for the query block at `m0` of query
    /// head `head`, its dS^T at shared address `ds_smem` (see `accumulate_dq`).
    #[allow(clippy::too_many_arguments)]
    pub fn emit_if(
        &self,
        b: &mut Builder,
        plan: &KernelPlan,
        p: &Params,
        w: &Warp,
        run: Reg<Pred>,
        ds_smem: Reg<B32>,
        (head, m0): (Reg<B32>, Reg<B32>),
    ) {
        b.if_uniform(run, |b| {
            let dw = match &self.warp {
                Some(dw) => dw.clone(),
                None => dq_warp(b, plan, w),
            };
            let (batch, heads) = self.batch_heads;
            accumulate_dq(
                b,
                plan,
                p,
                w,
                (self.smem, ds_smem, self.ds_tile, self.k_tile),
                &dw,
                (batch, head, heads, m0, self.seqlen_q),
            );
        });
    }
}

/// The warp's share of the atomic dQ: its row tile and column group (warp `w` takes row
/// tile `w % row_tiles`) and the lane offsets of its dS rows.
pub fn dq_warp(b: &mut Builder, plan: &KernelPlan, w: &Warp) -> DqWarp {
    let split = dq_split(plan);
    let (qw, grp) = if split.groups > 1 {
        (
            b.rem_u32(w.warp, split.row_tiles),
            Some(b.div_u32(w.warp, split.row_tiles)),
        )
    } else {
        (w.warp, None)
    };
    let lanes = (0..split.m_tiles)
        .map(|mt| {
            let chunk = b.mad_lo_u32(qw, 2 * split.m_tiles, 2 * mt);
            ldm_lane_offset_emit(b, &LDM_B_NK, w.lane, chunk)
        })
        .collect();
    DqWarp { qw, grp, lanes }
}

/// The warps' split of the atomic dQ: `m_tiles` (1 or 2) m16 tiles of query rows per
/// warp, `row_tiles = block_m / (16 m_tiles)` row tiles times `groups` column groups of
/// `panels` whole 64-column panels each. Two m-tiles (32 queries, FA2's dQ warp tile) in
/// the 8-warp exchange layout (d256) where the groups split the panels evenly: each K
/// fragment then feeds two mma, and the accumulator (32 f32 per thread) covers 32
/// columns per pass instead of 64. Not on the 4-warp d128 exchange layout, where it is
/// slower at the same 255 registers, nor at d96, which spills with it
/// (docs/performance.md).
pub fn dq_split(plan: &KernelPlan) -> DqSplit {
    let spec = &plan.spec;
    let t = plan.tiles.sm80();
    let all_panels = spec.head_dim.div_ceil(64);
    // `m_tiles` rows per warp tile, if the warps split the block and the panels evenly
    let split = |m_tiles: u32| {
        let row_tiles = t.block_m / (16 * m_tiles);
        let fits = row_tiles > 0
            && t.block_m % (16 * m_tiles) == 0
            && t.warps % row_tiles == 0
            && all_panels % (t.warps / row_tiles) == 0;
        fits.then(|| {
            let groups = t.warps / row_tiles;
            DqSplit {
                m_tiles,
                row_tiles,
                groups,
                panels: all_panels / groups,
            }
        })
    };
    let wide = (t.layout.exchange() && t.warps >= 8)
        .then(|| split(2))
        .flatten();
    wide.or_else(|| split(1))
        .unwrap_or_else(|| panic!("generator bug: no dQ split of {t:?}"))
}

/// See [`dq_split`].
#[derive(Clone, Copy, Debug)]
pub struct DqSplit {
    /// m16 tiles of query rows per warp.
    pub m_tiles: u32,
    /// Row tiles of `16 m_tiles` queries in the block.
    pub row_tiles: u32,
    /// Column groups (warps per row tile).
    pub groups: u32,
    /// 64-column panels per group.
    pub panels: u32,
}

/// dQ += dS K over the block's keys (the caller orders the dS^T stores before it, and its
/// reads before the tile is stored again): warp (qw, grp) reads its `16 m_tiles` query
/// rows of the dS^T tile at shared address `ds_smem` back transposed (ldmatrix.trans),
/// multiplies them by its group's panels of K, 64 / m_tiles columns at a time, and adds
/// the result into dq_accum (f32 tiles in fragment order, see
/// [`crate::tile::frag::ACCUM_TILE_FLOATS`]) with red.global.add.f32: one 128-byte line
/// per warp-wide instruction.
#[allow(clippy::type_complexity)]
fn accumulate_dq(
    b: &mut Builder,
    plan: &KernelPlan,
    p: &Params,
    w: &Warp,
    (smem, ds_smem, ds_tile, k_tile): (Reg<B32>, Reg<B32>, &SmemTile, &SmemTile),
    dw: &DqWarp,
    (batch, head, heads, m0, seqlen_q): (Reg<B32>, Reg<B32>, Reg<B32>, Reg<B32>, Reg<B32>),
) {
    let spec = &plan.spec;
    let fmt: HalfFmt = half_fmt(spec.dtype);
    let t = plan.tiles.sm80();
    let d = spec.head_dim;
    let split = dq_split(plan);
    let (m_tiles, panels) = (split.m_tiles, split.panels);
    b.comment("-- dQ += dS K (atomic) --");
    // a[mt][kk]: dS rows (m-tile mt of the warp's queries) x keys 16kk..16kk+16
    let a: Vec<Vec<[Reg<B32>; 4]>> = dw
        .lanes
        .iter()
        .map(|&lane_off| {
            let ds_base = b.add_u32(ds_smem, lane_off);
            (0..t.block_n / 16)
                .map(|kk| {
                    b.ldmatrix::<4>(
                        true,
                        Addr::Shared(ds_base, (ds_tile.base + 16 * kk * ROW_BYTES) as i32),
                    )
                })
                .collect()
        })
        .collect();
    let head_dim = p.get(HEAD_DIM);
    let accum = b.cvta_global(p.get(DQ_ACCUM));
    // the group's first K panel and first column (compile-time 0 with one group)
    let (k_smem, col0) = match dw.grp {
        Some(grp) => (
            b.mad_lo_u32(grp, panels * k_tile.rows * ROW_BYTES, smem),
            Some(b.mul_lo_u32(grp, 64 * panels)),
        ),
        None => (smem, None),
    };
    // each m-tile's 16 query rows are one row of accumulator tiles (frag::ACCUM_TILE_FLOATS)
    let q_row0 = b.mul_lo_u32(dw.qw, 16 * m_tiles);
    let q_row0 = b.add_u32(q_row0, m0);
    let grid = p.accum_grid(b, head_dim);
    let (bh, acc_row0) = p.accum_at(b, (batch, heads, head), q_row0);
    let c8 = col0.map(|c0| b.shr_u32(c0, 3u32));
    let tile = grid.tile(b, bh, acc_row0, c8);
    let lane_bytes = b.mul_wide_u32(w.lane, 4u32);
    let off = b.mad_wide_u32(tile, 4 * ACCUM_TILE_FLOATS, lane_bytes);
    let base0 = b.add_s64(accum, off);
    let row_bytes = b.mul_wide_u32(grid.col_tiles, 4 * ACCUM_TILE_FLOATS);
    let mut bases = vec![base0];
    let mut tiles_ok = vec![b.setp_u32(Cmp::Lt, q_row0, seqlen_q)];
    for mt in 1..m_tiles {
        let prev = bases[mt as usize - 1];
        bases.push(b.add_s64(prev, row_bytes));
        let row = b.add_u32(q_row0, 16 * mt);
        tiles_ok.push(b.setp_u32(Cmp::Lt, row, seqlen_q));
    }
    let width = 64 / m_tiles;
    for panel in 0..panels {
        let tile = SmemTile::new(
            k_tile.base + panel * k_tile.rows * ROW_BYTES,
            k_tile.rows,
            64,
        );
        for part in 0..m_tiles {
            let first = 64 * panel + width * part;
            if first >= d {
                break;
            }
            let cols = (d - first).min(width);
            let mut acc = AccTile::zeros(b, m_tiles as usize, cols);
            let chunk0 = width * part / 8;
            w.mma_a_b(b, fmt, &mut acc, &a, (&tile, k_smem), chunk0);
            // ptxas wraps every predicated red in its own BSSY/BRA/BSYNC (32 per d128 step,
            // stalls on branch resolution); the predicates are warp-uniform, so one uniform
            // branch picks unpredicated reds for whole tiles
            let end = first + cols;
            let end = match col0 {
                Some(c0) => b.add_u32(c0, end),
                None => b.mov(end),
            };
            let cols_ok = b.setp_u32(Cmp::Le, end, head_dim);
            let whole = b.and_pred(tiles_ok[m_tiles as usize - 1], cols_ok);
            let whole_tiles = |b: &mut Builder| {
                for (mt, &base) in bases.iter().enumerate() {
                    red_tiles(b, &acc.m_tile(mt), base, first, None);
                }
            };
            let edge_tiles = |b: &mut Builder| {
                for (mt, (&base, &tile_ok)) in bases.iter().zip(&tiles_ok).enumerate() {
                    let edge = Edge {
                        tile_ok,
                        col0,
                        head_dim,
                    };
                    red_tiles(b, &acc.m_tile(mt), base, first, Some(&edge));
                }
            };
            b.if_else_uniform(whole, whole_tiles, edge_tiles);
        }
    }
}

/// What an edge tile's reds are predicated on.
struct Edge {
    /// The m-tile's query rows start below seqlen_q.
    tile_ok: Reg<Pred>,
    /// The group's first column (`None`: 0).
    col0: Option<Reg<B32>>,
    /// The problem's head dim.
    head_dim: Reg<B32>,
}

/// `red.global.add.f32` of the n-tiles of one m-tile `acc` (columns `first..` of the
/// warp's group) at their fragment-ordered slots from `base`; with an [`Edge`] each
/// n-tile is predicated on its query tile and columns being inside the problem.
fn red_tiles(b: &mut Builder, acc: &AccTile, base: Reg<B64>, first: u32, edge: Option<&Edge>) {
    let tile_bytes = 4 * ACCUM_TILE_FLOATS;
    for nt in 0..acc.n_tiles() {
        let col = first + 8 * nt as u32;
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
        for (reg, v) in acc.frag(0, nt).into_iter().enumerate() {
            let slot = accum_slot(reg as u32, 0);
            let addr = Addr::Global(base, (tile_off + 4 * slot) as i32);
            match ok {
                Some(ok) => b.when(ok, false, |b| b.red_add_f32(addr, v)),
                None => b.red_add_f32(addr, v),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{KernelSpec, Pass, Tuning};

    /// Every table row's dQ split covers the query block and the head dim's panels
    /// exactly once, with whole panels per group; 32-row tiles only on the 8-warp
    /// exchange layout (d256's standard row, not its compact one).
    #[test]
    fn dq_split_covers_the_block_once() {
        for spec in KernelSpec::all()
            .into_iter()
            .filter(|s| s.pass == Pass::Bwd)
        {
            let plan = spec.plan(&Tuning::NONE);
            let (t, s) = (plan.tiles.sm80(), dq_split(&plan));
            assert_eq!(s.row_tiles * 16 * s.m_tiles, t.block_m, "{spec}: rows");
            assert_eq!(s.row_tiles * s.groups, t.warps, "{spec}: warps");
            assert_eq!(
                s.groups * s.panels,
                spec.head_dim.div_ceil(64),
                "{spec}: panels"
            );
            let wide = spec.head_dim == 256 && t.layout.exchange();
            assert_eq!(s.m_tiles == 2, wide, "{spec}: m-tiles");
        }
    }
}
