//! Tile layer: the fragment layouts of `mma.sync.m16n8k16` and the `ldmatrix` lane
//! addressing, written once from the PTX ISA tables (ptx-reference.md §2.2, §3).
//!
//! Every map is a [`LaneExpr`]: a sum of lane bit-fields plus a constant, so the same
//! formula evaluates on host integers (tests) and emits IR for the registers of a lane.

use crate::ptx::{B32, Builder, Reg};

/// `sum(coef * ((lane >> shift) & mask)) + constant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneExpr {
    terms: [(u32, u32, u32); 2],
    constant: u32,
}

impl LaneExpr {
    const fn new(t0: (u32, u32, u32), t1: (u32, u32, u32), constant: u32) -> Self {
        LaneExpr {
            terms: [t0, t1],
            constant,
        }
    }
    const NONE: (u32, u32, u32) = (0, 0, 0);

    /// The value for one lane (0..32).
    pub fn eval(&self, lane: u32) -> u32 {
        self.terms
            .iter()
            .map(|&(s, m, c)| c * ((lane >> s) & m))
            .sum::<u32>()
            + self.constant
    }

    /// The lane-independent part.
    pub fn constant(&self) -> u32 {
        self.constant
    }

    /// Emits the lane-dependent part of the value for the lane id in `lane`.
    pub fn emit(&self, b: &mut Builder, lane: Reg<B32>) -> Reg<B32> {
        let mut acc: Option<Reg<B32>> = None;
        for &(shift, mask, coef) in &self.terms {
            if coef == 0 || mask == 0 {
                continue;
            }
            let s = if shift == 0 {
                lane
            } else {
                b.shr_u32(lane, shift)
            };
            let m = b.and_b32(s, mask);
            acc = Some(match acc {
                None => b.mul_lo_u32(m, coef),
                Some(a) => b.mad_lo_u32(m, coef, a),
            });
        }
        let v = acc.unwrap_or_else(|| b.mov(0u32));
        if self.constant == 0 {
            v
        } else {
            b.add_u32(v, self.constant)
        }
    }
}

/// groupID g = lane >> 2 (times `c`).
const fn g(c: u32) -> (u32, u32, u32) {
    (2, 7, c)
}
/// threadID_in_group t = lane & 3 (times `c`).
const fn t(c: u32) -> (u32, u32, u32) {
    (0, 3, c)
}

/// A (row, col) position inside a fragment's tile, as lane expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coord {
    /// Row inside the tile.
    pub row: LaneExpr,
    /// Column inside the tile.
    pub col: LaneExpr,
}

/// A operand (16x16, row-major M x K): register `i` (0..4), half `h` (0 = low, 1 = high).
/// row = g + 8*(i&1), col = 2t + 8*(i>>1) + h.
pub const fn a_frag(i: u32, h: u32) -> Coord {
    Coord {
        row: LaneExpr::new(g(1), LaneExpr::NONE, 8 * (i & 1)),
        col: LaneExpr::new(t(2), LaneExpr::NONE, 8 * (i >> 1) + h),
    }
}

/// B operand (16x8, K x N): register `i` (0..2), half `h`. row = k = 2t + 8i + h, col = n = g.
pub const fn b_frag(i: u32, h: u32) -> Coord {
    Coord {
        row: LaneExpr::new(t(2), LaneExpr::NONE, 8 * i + h),
        col: LaneExpr::new(g(1), LaneExpr::NONE, 0),
    }
}

/// C/D accumulator (16x8 f32): register `i` (0..4). row = g + 8*(i>>1), col = 2t + (i&1).
pub const fn c_frag(i: u32) -> Coord {
    Coord {
        row: LaneExpr::new(g(1), LaneExpr::NONE, 8 * (i >> 1)),
        col: LaneExpr::new(t(2), LaneExpr::NONE, i & 1),
    }
}

/// The atomic backward's dQ accumulator is stored in accumulator-fragment order, FA2's
/// trick: f32 tiles of 16 rows x 8 columns, tile `(r16, c8)` of `(batch, head)` at
/// `((batch * heads + head) * ceil(seqlen_q / 16) + r16) * head_dim / 8 + c8`, and inside a
/// tile the value of register `i` of lane `l` (see [`c_frag`]) at float `32 i + l`. So each
/// warp-wide `red.global.add.f32` of one register covers one 128-byte line (in row-major
/// order it touched 8 lines), and a buffer of `batch * heads * 16 ceil(seqlen_q / 16) *
/// head_dim` floats holds every tile (rows past seqlen_q are padding).
pub const ACCUM_TILE_FLOATS: u32 = 128;

/// The dQ accumulator's grid of tiles for one problem, as registers.
pub struct AccumGrid {
    /// Rows of tiles per (batch, head): `ceil(seqlen_q / 16)`.
    pub row_tiles: Reg<B32>,
    /// Columns of tiles: `head_dim / 8`.
    pub col_tiles: Reg<B32>,
}

impl AccumGrid {
    /// The grid of a problem with `seqlen_q` query rows and `head_dim` (a multiple of 8).
    pub fn new(b: &mut Builder, seqlen_q: Reg<B32>, head_dim: Reg<B32>) -> Self {
        let row_tiles = b.add_u32(seqlen_q, 15u32);
        AccumGrid {
            row_tiles: b.shr_u32(row_tiles, 4u32),
            col_tiles: b.shr_u32(head_dim, 3u32),
        }
    }

    /// Index of the tile holding query row `row` and column tile `c8` (`None`: 0) of
    /// `bh = batch * heads + head`.
    pub fn tile(
        &self,
        b: &mut Builder,
        bh: Reg<B32>,
        row: Reg<B32>,
        c8: Option<Reg<B32>>,
    ) -> Reg<B32> {
        let r16 = b.shr_u32(row, 4u32);
        let r16 = b.mad_lo_u32(bh, self.row_tiles, r16);
        match c8 {
            Some(c8) => b.mad_lo_u32(r16, self.col_tiles, c8),
            None => b.mul_lo_u32(r16, self.col_tiles),
        }
    }
}

/// Float offset of register `reg` of `lane` inside a dQ accumulator tile.
pub const fn accum_slot(reg: u32, lane: u32) -> u32 {
    32 * reg + lane
}

/// Float offset, inside a dQ accumulator tile, of the first of the two 4-float runs holding
/// row `row` (0..16), as a bit-field expression of the row; run `e` starts `32 e` floats
/// later and holds columns `e, e + 2, e + 4, e + 6`.
pub const ACCUM_ROW_RUN: LaneExpr = LaneExpr::new((3, 1, 64), (0, 7, 4), 0);

/// Float offsets of both runs of row `row` (see [`ACCUM_ROW_RUN`]).
pub fn accum_row_runs(row: u32) -> [u32; 2] {
    let first = ACCUM_ROW_RUN.eval(row);
    [first, first + 32]
}

/// Row and 8-column chunk a lane addresses in an `ldmatrix.x4`, relative to the tile origin.
/// `chunk` counts 16-byte (8-element) chunks along the contiguous dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LdmAddr {
    /// Row of the tile the lane's address points at.
    pub row: LaneExpr,
    /// 16-byte chunk (8 elements) along the contiguous dimension.
    pub chunk: LaneExpr,
}

/// `ldmatrix.x4` for the A operand of a 16x16 tile stored `[m][k]`:
/// lane l -> row l%16, chunk l/16. Registers: a0, a1, a2, a3.
pub const LDM_A: LdmAddr = LdmAddr {
    row: LaneExpr::new((0, 15, 1), LaneExpr::NONE, 0),
    chunk: LaneExpr::new((4, 1, 1), LaneExpr::NONE, 0),
};

/// `ldmatrix.x4` for B = X^T with X stored `[n][k]` (K in S = Q K^T): two n8 tiles, one k16
/// step. lane l -> row l%8 + 8*(l/16), chunk (l/8)&1. Registers: {b0,b1} of n-tile 0, then 1.
pub const LDM_B_NK: LdmAddr = LdmAddr {
    row: LaneExpr::new((0, 7, 1), (4, 1, 8), 0),
    chunk: LaneExpr::new((3, 1, 1), LaneExpr::NONE, 0),
};

/// `ldmatrix.x4.trans` for B stored `[k][n]` (V in O = P V): one k16 step, two n8 tiles.
/// lane l -> row l%8 + 8*((l/8)&1), chunk l/16. Registers: {b0,b1} of n-tile 0, then 1.
pub const LDM_B_KN_TRANS: LdmAddr = LdmAddr {
    row: LaneExpr::new((0, 7, 1), (3, 1, 8), 0),
    chunk: LaneExpr::new((4, 1, 1), LaneExpr::NONE, 0),
};

/// What register `reg` half `h` of lane `lane` holds after `ldmatrix` (no `.trans`) of
/// 8x8 matrix `m = reg`: (row, col) inside that matrix. With `.trans`, row and col swap.
pub fn ldmatrix_elem(lane: u32, h: u32, trans: bool) -> (u32, u32) {
    let (r, c) = (lane / 4, 2 * (lane % 4) + h);
    if trans { (c, r) } else { (r, c) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spot_checks_from_the_reference() {
        // lane 5: g=1, t=1 -> a0 (1, 2..3), a3 (9, 10..11), b1 k 10..11 n 1, c3 (9, 3)
        assert_eq!((a_frag(0, 0).row.eval(5), a_frag(0, 0).col.eval(5)), (1, 2));
        assert_eq!(
            (a_frag(3, 1).row.eval(5), a_frag(3, 1).col.eval(5)),
            (9, 11)
        );
        assert_eq!(
            (b_frag(1, 0).row.eval(5), b_frag(1, 0).col.eval(5)),
            (10, 1)
        );
        assert_eq!((c_frag(3).row.eval(31), c_frag(3).col.eval(31)), (15, 7));
    }

    /// The dQ accumulator's row runs hold exactly what the fragment slots put there.
    #[test]
    fn accum_row_runs_match_fragment_slots() {
        let mut seen = [false; ACCUM_TILE_FLOATS as usize];
        for lane in 0..32 {
            for reg in 0..4 {
                let (row, col) = (c_frag(reg).row.eval(lane), c_frag(reg).col.eval(lane));
                let slot = accum_slot(reg, lane);
                assert_eq!(slot, accum_row_runs(row)[(col % 2) as usize] + col / 2);
                assert!(!seen[slot as usize]);
                seen[slot as usize] = true;
            }
        }
    }

    /// ldmatrix.x4 with the A recipe delivers exactly the A fragment layout.
    #[test]
    fn ldmatrix_a_recipe_matches_a_fragment() {
        for lane in 0..32 {
            for reg in 0..4u32 {
                for h in 0..2 {
                    // matrix `reg` is addressed by lanes 8*reg..8*reg+7
                    let (r, c) = ldmatrix_elem(lane, h, false);
                    let src = 8 * reg + r;
                    let (row, col) = (LDM_A.row.eval(src), LDM_A.chunk.eval(src) * 8 + c);
                    let want = a_frag(reg, h);
                    assert_eq!((row, col), (want.row.eval(lane), want.col.eval(lane)));
                }
            }
        }
    }
}
