//! Tile layer: swizzled shared-memory tiles (FA2's `Swizzle<3,3,3>` on 64-column panels).
//!
//! A tile of `rows` x `cols` 16-bit elements (cols a multiple of 64) is stored as
//! `[cols/64 panels][rows][64]`; inside a panel the 16-byte chunk `c` of row `r` sits at
//! chunk `c ^ (r & 7)`. Eight consecutive rows at one logical chunk then hit eight distinct
//! bank groups, so `ldmatrix` (plain or `.trans`) and 16-byte `cp.async` are conflict-free.

use super::frag::LdmAddr;
use crate::ptx::{Addr, B32, Builder, Reg};
use crate::spec::TileRegion;

/// Bytes per panel row (64 elements of 2 bytes).
pub const ROW_BYTES: u32 = 128;

/// A swizzled tile at a fixed byte offset of the dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmemTile {
    /// Byte offset from the start of dynamic shared memory.
    pub base: u32,
    /// Rows, a multiple of 8.
    pub rows: u32,
    /// Columns (elements), a multiple of 64.
    pub cols: u32,
}

impl From<TileRegion> for SmemTile {
    /// The tile of a region of the kernel's shared-memory layout.
    fn from(r: TileRegion) -> Self {
        SmemTile::new(r.base, r.rows, r.cols)
    }
}

impl SmemTile {
    /// A tile at byte offset `base`; panics (generator bug) unless `cols` is a multiple of
    /// 64 and `rows` of 8.
    pub fn new(base: u32, rows: u32, cols: u32) -> Self {
        assert!(
            cols % 64 == 0 && rows % 8 == 0,
            "generator bug: tile {rows}x{cols} is not panel-aligned"
        );
        SmemTile { base, rows, cols }
    }

    /// Bytes the tile occupies (`rows * cols * 2`).
    pub fn bytes(&self) -> u32 {
        self.rows * self.cols * 2
    }

    /// The same tile seen from row `r0` on (a multiple of 8, so the swizzle is unchanged):
    /// row r of the view is row r0 + r of the tile.
    pub fn rows_from(&self, r0: u32) -> SmemTile {
        assert!(
            r0 % 8 == 0 && r0 < self.rows,
            "generator bug: sub-tile at row {r0}"
        );
        SmemTile {
            base: self.base + r0 * ROW_BYTES,
            ..*self
        }
    }

    /// Byte offset (from `base`) of 16-byte chunk `chunk` of row `row`, on host integers.
    pub fn offset(&self, row: u32, chunk: u32) -> u32 {
        (chunk / 8) * self.rows * ROW_BYTES + row * ROW_BYTES + (((chunk % 8) ^ (row % 8)) << 4)
    }

    /// The same offset for run-time row and chunk registers.
    pub fn emit_offset(&self, b: &mut Builder, row: Reg<B32>, chunk: Reg<B32>) -> Reg<B32> {
        let panel = b.shr_u32(chunk, 3);
        let c = b.and_b32(chunk, 7);
        let r7 = b.and_b32(row, 7);
        let sw = b.xor_b32(c, r7);
        let sw = b.shl_b32(sw, 4);
        let off = b.mad_lo_u32(panel, self.rows * ROW_BYTES, sw);
        b.mad_lo_u32(row, ROW_BYTES, off)
    }
}

/// Per-lane `ldmatrix` addressing of one recipe into swizzled tiles: four lane offsets
/// (one per even chunk position inside a panel) computed once; every later `ldmatrix`
/// address is `tile_base + lane_off[..] + constant`.
#[derive(Clone, Copy, Debug)]
pub struct LdmLanes {
    lane_off: [Reg<B32>; 4],
}

/// The host value of a lane offset (what [`LdmLanes::new`] emits), for tests.
pub fn ldm_lane_offset(recipe: &LdmAddr, lane: u32, even_chunk: u32) -> u32 {
    let row = recipe.row.eval(lane);
    let chunk = even_chunk + recipe.chunk.eval(lane);
    row * ROW_BYTES + ((chunk ^ (row % 8)) << 4)
}

/// The lane offset of `recipe` for a run-time even chunk (`even_chunk + chunk(lane) < 8`:
/// the addressed chunks stay inside one 64-column panel).
pub fn ldm_lane_offset_emit(
    b: &mut Builder,
    recipe: &LdmAddr,
    lane: Reg<B32>,
    even_chunk: Reg<B32>,
) -> Reg<B32> {
    let row = recipe.row.emit(b, lane);
    let chunk = recipe.chunk.emit(b, lane);
    let c = b.add_u32(chunk, even_chunk);
    let r7 = b.and_b32(row, 7);
    let sw = b.xor_b32(c, r7);
    let sw = b.shl_b32(sw, 4);
    b.mad_lo_u32(row, ROW_BYTES, sw)
}

impl LdmLanes {
    /// Emits the four lane offsets of `recipe` for the lane id in `lane`.
    pub fn new(b: &mut Builder, recipe: &LdmAddr, lane: Reg<B32>) -> Self {
        assert!(recipe.row.constant() == 0 && recipe.chunk.constant() == 0);
        let row = recipe.row.emit(b, lane);
        let chunk = recipe.chunk.emit(b, lane);
        let r7 = b.and_b32(row, 7);
        let rbytes = b.mul_lo_u32(row, ROW_BYTES);
        let lane_off = std::array::from_fn(|i| {
            let c = b.add_u32(chunk, 2 * i as u32);
            let sw = b.xor_b32(c, r7);
            let sw = b.shl_b32(sw, 4);
            b.add_u32(sw, rbytes)
        });
        LdmLanes { lane_off }
    }

    /// The address of the `ldmatrix` at rows `row0..` (a multiple of 8) and chunks
    /// `chunk0..` (even) of `tile`; `smem` is the shared address `tile.base` is relative to.
    pub fn addr(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        tile: &SmemTile,
        row0: u32,
        chunk0: u32,
    ) -> Addr {
        assert!(
            row0 % 8 == 0 && chunk0 % 2 == 0,
            "generator bug: ldmatrix origin ({row0}, {chunk0})"
        );
        let r = b.add_u32(smem, self.lane_off[((chunk0 % 8) / 2) as usize]);
        let k = tile.base + (chunk0 / 8) * tile.rows * ROW_BYTES + row0 * ROW_BYTES;
        Addr::Shared(r, k as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile::frag::{LDM_A, LDM_B_KN_TRANS, LDM_B_NK};

    #[test]
    fn swizzle_is_a_bijection_per_panel() {
        let t = SmemTile::new(0, 64, 128);
        let mut seen = std::collections::BTreeSet::new();
        for r in 0..64 {
            for c in 0..16 {
                assert!(seen.insert(t.offset(r, c)));
            }
        }
        assert_eq!(seen.len() as u32 * 16, t.bytes());
        assert_eq!(*seen.iter().max().unwrap() + 16, t.bytes());
    }

    #[test]
    fn lane_offsets_match_the_tile_layout() {
        let t = SmemTile::new(0, 64, 256);
        for recipe in [LDM_A, LDM_B_NK, LDM_B_KN_TRANS] {
            for lane in 0..32 {
                for row0 in (0..48).step_by(16) {
                    for chunk0 in (0..32).step_by(2) {
                        let k = (chunk0 / 8) * t.rows * ROW_BYTES + row0 * ROW_BYTES;
                        let got = ldm_lane_offset(&recipe, lane, chunk0 % 8) + k;
                        let want = t.offset(
                            row0 + recipe.row.eval(lane),
                            chunk0 + recipe.chunk.eval(lane),
                        );
                        assert_eq!(got, want, "lane {lane} row0 {row0} chunk0 {chunk0}");
                    }
                }
            }
        }
    }

    /// No two lanes of one 8-lane ldmatrix phase touch the same bank group.
    #[test]
    fn ldmatrix_phases_are_conflict_free() {
        let t = SmemTile::new(0, 64, 128);
        for recipe in [LDM_A, LDM_B_NK, LDM_B_KN_TRANS] {
            for phase in 0..4 {
                let banks: std::collections::BTreeSet<u32> = (8 * phase..8 * phase + 8)
                    .map(|l| (t.offset(recipe.row.eval(l), recipe.chunk.eval(l)) / 16) % 8)
                    .collect();
                assert_eq!(banks.len(), 8);
            }
        }
    }
}
