//! Tile layer: the host-side map of an accumulator tile (tests and documentation):
//! where each thread's registers sit in an `mma.sync` or `wgmma` product.

use super::{AccTile, Elem, LANE_COL, LANE_ROW, M_TILE_ROWS, N_TILE_COLS, REGS};

/// Threads of a warp.
const WARP_LANES: u32 = 32;
/// Warps of a warpgroup (`wgmma`).
const WARPGROUP_WARPS: u32 = 4;

/// Host-side map of an accumulator (tests and documentation): where each thread's
/// registers sit in the product, from [`Elem`], [`AccTile::row_offset`] and [`c_frag`](crate::tile::frag::c_frag).
/// Warp `w` holds product rows `16 m_tiles w..` as an [`AccTile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccLayout {
    /// Warps sharing the accumulator (32 threads each).
    pub warps: u32,
    /// M-tiles of each warp's tile.
    pub m_tiles: usize,
    /// N-tiles of each warp's tile (the product's columns / 8).
    pub n_tiles: usize,
}

impl AccLayout {
    /// One warp's `mma.sync` accumulator of `m_tiles` x `n_tiles` fragments.
    pub fn mma(m_tiles: usize, n_tiles: usize) -> Self {
        let warps = 1;
        AccLayout {
            warps,
            m_tiles,
            n_tiles,
        }
    }

    /// A warpgroup's `wgmma` m64nN f32 accumulator: warp `w` holds rows `16 w..` as an
    /// [`AccTile`] of one m-tile and `n / 8` n-tiles.
    pub fn wgmma(n: u32) -> Self {
        assert!(n % N_TILE_COLS == 0 && (8..=256).contains(&n), "wgmma n{n}");
        let (warps, n_tiles) = (WARPGROUP_WARPS, (n / N_TILE_COLS) as usize);
        AccLayout {
            warps,
            m_tiles: 1,
            n_tiles,
        }
    }

    /// (row, col) of register `reg` of fragment (`mt`, `nt`) of thread `thread`.
    pub fn coord(&self, thread: u32, mt: usize, nt: usize, reg: usize) -> (u32, u32) {
        let (warp, lane) = (thread / WARP_LANES, thread % WARP_LANES);
        let el = Elem::of(mt, nt, reg);
        let warp_row = warp * M_TILE_ROWS * self.m_tiles as u32;
        let row = warp_row + LANE_ROW.eval(lane) + AccTile::row_offset(el.row);
        (row, LANE_COL.eval(lane) + el.col())
    }

    /// The `wgmma` register `d[v]` of register `reg` of n-tile `nt`: its place in the
    /// tile's fragment order ([`AccTile::regs`]).
    pub fn wgmma_reg(nt: usize, reg: usize) -> usize {
        REGS * nt + reg
    }
}
