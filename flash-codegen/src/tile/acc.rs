//! Tile layer: accumulator tiles: a warp's f32 C fragments of a product, with the row /
//! column map of `mma.sync` m16n8 (ptx-reference.md §2.2) and of `wgmma` m64nN (§10.3:
//! each warp holds a 16-row slice of it, and each 8-column slice is an m16n8 C fragment).
//!
//! A thread holds [`AccTile::rows`] *thread rows*: thread row `r` is product row
//! `lane_row + row_offset(r)` (m-tile `r / 2`, half `r % 2`, see [`AccTile::row_offset`]),
//! and in n-tile `nt` it holds the two adjacent columns `lane_col + 8 nt + pair`. Kernels
//! name an element by its [`Elem`] (thread row, n-tile, pair), never by fragment register.
//!
//! Every verb that writes takes `&mut self`, of two kinds. *In place*
//! ([`AccTile::scale_row`], [`AccTile::scale`], [`AccTile::mask`], and an `mma` into the
//! tile) write into the tile's own registers (`mov`, where control paths join on them or
//! a loop carries them); they reach every view sharing the registers. *Handle-replacing*
//! ([`AccTile::exp2_row`], the maps) make the new values the tile's registers, with no
//! `mov`; a view's parent keeps its old handles.

use super::frag::{LaneExpr, a_frag, c_frag};
use crate::ptx::{B32, Builder, Cmp, F32, HalfFmt, Reg};

/// Zero, the initial accumulator value.
const ZERO: f32 = 0.0;
/// The masked score.
const NEG_INF: f32 = f32::NEG_INFINITY;
/// Registers of one C fragment.
const REGS: usize = 4;
/// Rows of an m-tile.
const M_TILE_ROWS: u32 = 16;
/// Columns of an n-tile.
const N_TILE_COLS: u32 = 8;
/// The lanes sharing a row differ in `t = lane & 3`: butterfly masks of the quad.
const QUAD_MASKS: [u32; 2] = [1, 2];
/// A binary f32 instruction (the quad reductions' operation).
type BinOp = fn(&mut Builder, Reg<F32>, Reg<F32>) -> Reg<F32>;
/// The lane part of an element's row (`g`) and column (`2t`): those of C register 0.
const LANE_ROW: LaneExpr = c_frag(0).row;
const LANE_COL: LaneExpr = c_frag(0).col;

/// An element of a thread's accumulator: thread row `row` (see [`AccTile::row_offset`]),
/// n-tile `n_tile`, and `pair` (0, 1) of the two adjacent columns the thread holds there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elem {
    /// Thread row (m-tile `row / 2`, half `row % 2`).
    pub row: usize,
    /// N-tile (8 columns).
    pub n_tile: usize,
    /// Which of the thread's two adjacent columns of the n-tile.
    pub pair: usize,
}

impl Elem {
    /// The element in register `reg` (0..4) of C fragment (`mt`, `nt`), from [`c_frag`].
    pub fn of(mt: usize, nt: usize, reg: usize) -> Elem {
        let c = c_frag(reg as u32);
        Elem {
            row: 2 * mt + (c.row.constant() / 8) as usize,
            n_tile: nt,
            pair: c.col.constant() as usize,
        }
    }

    /// The m-tile the element is in.
    #[must_use]
    pub fn m_tile(&self) -> usize {
        self.row / 2
    }

    /// Its register in its C fragment (the inverse of [`Elem::of`]).
    pub fn reg(&self) -> usize {
        (0..REGS)
            .find(|&e| Elem::of(self.m_tile(), self.n_tile, e) == *self)
            .expect("generator bug: pair out of range")
    }

    /// Its column relative to the thread's first column (`2t`): `8 n_tile + pair`.
    pub fn col(&self) -> u32 {
        N_TILE_COLS * self.n_tile as u32 + self.pair as u32
    }
}

/// A warp's accumulator: `[m-tile][n-tile]` m16n8 C fragments (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct AccTile {
    frags: Vec<Vec<[Reg<F32>; REGS]>>,
}

impl AccTile {
    /// `m_tiles` x `n_cols / 8` zero fragments: `mov 0.0` per register, m-tile, n-tile,
    /// then register order.
    pub fn zeros(b: &mut Builder, m_tiles: usize, n_cols: u32) -> Self {
        assert_eq!(n_cols % N_TILE_COLS, 0, "generator bug: {n_cols} columns");
        let n_tiles = (n_cols / N_TILE_COLS) as usize;
        let frags = (0..m_tiles)
            .map(|_| {
                (0..n_tiles)
                    .map(|_| std::array::from_fn(|_| b.mov(ZERO)))
                    .collect()
            })
            .collect();
        AccTile { frags }
    }

    /// A tile of existing fragments `[m-tile][n-tile]` (every m-tile as wide).
    pub fn from_frags(frags: Vec<Vec<[Reg<F32>; REGS]>>) -> Self {
        let n = frags.first().map_or(0, Vec::len);
        assert!(
            frags.iter().all(|f| f.len() == n),
            "generator bug: ragged tile"
        );
        AccTile { frags }
    }

    /// A warpgroup `wgmma` accumulator of `n_cols` columns, this warp's 16 rows as one
    /// m-tile, in fresh registers with no value: the product's first k-step writes them
    /// (`scale-d` 0).
    pub fn for_wgmma(b: &mut Builder, n_cols: u32) -> Self {
        assert!(
            n_cols % N_TILE_COLS == 0 && (8..=256).contains(&n_cols),
            "generator bug: wgmma accumulator of {n_cols} columns"
        );
        let n_tiles = (n_cols / N_TILE_COLS) as usize;
        let frags = vec![
            (0..n_tiles)
                .map(|_| std::array::from_fn(|_| b.reg()))
                .collect(),
        ];
        AccTile { frags }
    }

    /// The registers in `wgmma`'s `d[0..N/2]` order of a one-m-tile accumulator:
    /// [`AccTile::regs`] ([`AccLayout::wgmma_reg`]: n-tile, then register).
    pub fn wgmma_regs(&self) -> Vec<Reg<F32>> {
        assert_eq!(
            self.m_tiles(),
            1,
            "generator bug: a wgmma accumulator has one m-tile"
        );
        self.regs().collect()
    }

    /// M16 tiles.
    pub fn m_tiles(&self) -> usize {
        self.frags.len()
    }

    /// N8 tiles.
    pub fn n_tiles(&self) -> usize {
        self.frags.first().map_or(0, Vec::len)
    }

    /// Thread rows: two per m-tile.
    pub fn rows(&self) -> usize {
        Self::thread_rows(self.m_tiles())
    }

    /// Thread rows of a tile of `m_tiles` m-tiles: two per m-tile.
    pub const fn thread_rows(m_tiles: usize) -> usize {
        2 * m_tiles
    }

    /// Columns of the product: `8 n_tiles`.
    pub fn cols(&self) -> u32 {
        N_TILE_COLS * self.n_tiles() as u32
    }

    /// The raw C fragment (`mt`, `nt`): for the `mma` itself and fragment-ordered stores.
    pub fn frag(&self, mt: usize, nt: usize) -> [Reg<F32>; REGS] {
        self.frags[mt][nt]
    }

    /// Every register in fragment order (m-tile, n-tile, register): with one m-tile, the
    /// `d[0..N/2]` order of a `wgmma` m64nN accumulator (see [`AccLayout::wgmma_reg`](layout::AccLayout::wgmma_reg)).
    pub fn regs(&self) -> impl Iterator<Item = Reg<F32>> + '_ {
        self.frags.iter().flatten().flatten().copied()
    }

    /// M-tile `mt` alone, sharing the registers: in-place writes reach this tile,
    /// handle-replacing ones do not.
    pub fn m_tile(&self, mt: usize) -> AccTile {
        AccTile::from_frags(vec![self.frags[mt].clone()])
    }

    /// N-tiles `nt0..nt0 + n` (columns `8 nt0..`), sharing the registers like
    /// [`AccTile::m_tile`].
    #[must_use]
    pub fn n_tiles_from(&self, nt0: usize, n: usize) -> AccTile {
        AccTile::from_frags(
            self.frags
                .iter()
                .map(|f| f[nt0..nt0 + n].to_vec())
                .collect(),
        )
    }

    /// Product rows from the thread's row 0 to its row `r`: `8 r` (m-tile `r / 2`,
    /// half `r % 2`), so one address with immediate offsets serves every row.
    pub fn row_offset(r: usize) -> u32 {
        let (_, reg) = Self::elem(r, 0, 0);
        M_TILE_ROWS * (r / 2) as u32 + c_frag(reg as u32).row.constant()
    }

    /// The lane's first row `g = lane >> 2`, for the lane id in `lane`.
    pub fn lane_row(b: &mut Builder, lane: Reg<B32>) -> Reg<B32> {
        LANE_ROW.emit(b, lane)
    }

    /// The lane's first column `2t = 2 (lane & 3)`, for the lane id in `lane`.
    pub fn lane_col(b: &mut Builder, lane: Reg<B32>) -> Reg<B32> {
        LANE_COL.emit(b, lane)
    }

    /// The element (`row`, `n_tile`, `pair`) and its register in its fragment.
    fn elem(row: usize, n_tile: usize, pair: usize) -> (Elem, usize) {
        let el = Elem { row, n_tile, pair };
        (el, el.reg())
    }

    /// Row `r`'s elements and their registers: n-tile major, then pair.
    fn row_elems(r: usize, n_tiles: usize) -> impl Iterator<Item = (Elem, usize)> {
        (0..n_tiles).flat_map(move |nt| (0..2).map(move |pair| Self::elem(r, nt, pair)))
    }

    /// The register of element `el`.
    fn at(&self, el: Elem, reg: usize) -> Reg<F32> {
        self.frags[el.m_tile()][el.n_tile][reg]
    }

    /// Row `r`'s registers: n-tile major, then the two columns.
    pub fn row_regs(&self, r: usize) -> impl Iterator<Item = Reg<F32>> + '_ {
        Self::row_elems(r, self.n_tiles()).map(|(el, reg)| self.at(el, reg))
    }

    /// Row `r`'s two adjacent columns in n-tile `nt` (a packed store's low, high halves).
    pub fn pair(&self, r: usize, nt: usize) -> [Reg<F32>; 2] {
        [0, 1].map(|pair| {
            let (el, reg) = Self::elem(r, nt, pair);
            self.at(el, reg)
        })
    }

    /// Butterfly reduction over the four lanes of a quad (the lanes of one row).
    fn quad(b: &mut Builder, x: Reg<F32>, op: BinOp) -> Reg<F32> {
        QUAD_MASKS.iter().fold(x, |x, &m| {
            let y = b.shfl_bfly_f32(x, m);
            op(b, x, y)
        })
    }

    /// The max of `x` over the lanes of the thread's quad (`shfl.bfly` 1, then 2).
    pub fn quad_max(b: &mut Builder, x: Reg<F32>) -> Reg<F32> {
        Self::quad(b, x, |b, x, y| b.max_f32(x, y))
    }

    /// The sum of `x` over the lanes of the thread's quad (`shfl.bfly` 1, then 2).
    pub fn quad_sum(b: &mut Builder, x: Reg<F32>) -> Reg<F32> {
        Self::quad(b, x, |b, x, y| b.add_f32(x, y))
    }

    /// The max of `init` and row `r` over the warp's columns: folded over the thread's
    /// elements in row order, then over the quad.
    #[must_use]
    pub fn row_max(&self, b: &mut Builder, r: usize, init: Reg<F32>) -> Reg<F32> {
        let mx = self.row_regs(r).fold(init, |mx, x| b.max_f32(mx, x));
        Self::quad_max(b, mx)
    }

    /// In place: row `r`'s elements `*= factor` (row order).
    pub fn scale_row(&mut self, b: &mut Builder, r: usize, factor: Reg<F32>) {
        scale_regs(b, self.row_regs(r), factor);
    }

    /// In place: every element `*= factor` (fragment order).
    pub fn scale(&mut self, b: &mut Builder, factor: Reg<F32>) {
        scale_regs(b, self.regs(), factor);
    }

    /// Replacing: row `r`'s elements become `2^(x * scale + neg_max)` (row order), each
    /// added to `sum` as it is made; returns the new sum.
    #[must_use]
    pub fn exp2_row(
        &mut self,
        b: &mut Builder,
        r: usize,
        scale: Reg<F32>,
        neg_max: Reg<F32>,
        sum: Reg<F32>,
    ) -> Reg<F32> {
        self.exp2_row_with(b, r, (scale, neg_max), sum, |b, _, y| b.ex2(y))
    }

    /// [`AccTile::exp2_row`] with each 2^y made by `exp(b, n_tile, y)` (the element's
    /// n-tile given: a kernel may spread the work over the GPU's pipes by column).
    #[must_use]
    pub fn exp2_row_with(
        &mut self,
        b: &mut Builder,
        r: usize,
        (scale, neg_max): (Reg<F32>, Reg<F32>),
        mut sum: Reg<F32>,
        mut exp: impl FnMut(&mut Builder, usize, Reg<F32>) -> Reg<F32>,
    ) -> Reg<F32> {
        for (el, reg) in Self::row_elems(r, self.n_tiles()) {
            let y = b.fma_f32(self.at(el, reg), scale, neg_max);
            let p = exp(b, el.n_tile, y);
            self.frags[el.m_tile()][el.n_tile][reg] = p;
            sum = b.add_f32(sum, p);
        }
        sum
    }

    /// In place: per thread row `r` (in order), `rel = bound(b, r)`, then each element of
    /// the row (row order) stays where `setp.s32 keep, rel, col` holds (`col` =
    /// [`Elem::col`]) and becomes -inf elsewhere. `keep = Gt` with `rel = limit - 2t - n0`
    /// keeps columns below a limit; `Le` with `rel = first - 2t - m0` those from `first`.
    pub fn mask(
        &mut self,
        b: &mut Builder,
        keep: Cmp,
        mut bound: impl FnMut(&mut Builder, usize) -> Reg<B32>,
    ) {
        for r in 0..self.rows() {
            let rel = bound(b, r);
            for (el, reg) in Self::row_elems(r, self.n_tiles()) {
                let x = self.at(el, reg);
                let valid = b.setp_s32(keep, rel, el.col() as i32);
                let v = b.selp_f32(x, NEG_INF, valid);
                b.assign(x, v);
            }
        }
    }

    /// M-tile `mt` converted to `fmt` as A fragments of a next product (P V, dS K), one per
    /// k16 step: n-tiles `2 kk` and `2 kk + 1` are step `kk`'s A fragment, no data moving.
    #[must_use]
    pub fn as_a(&self, b: &mut Builder, fmt: HalfFmt, mt: usize) -> Vec<[Reg<B32>; 4]> {
        assert_eq!(self.n_tiles() % 2, 0, "generator bug: odd n-tile count");
        (0..self.n_tiles() / 2)
            .map(|kk| {
                std::array::from_fn(|i| {
                    let [lo, hi] = [0, 1].map(|h| {
                        let (nt, reg) = a_source(i as u32, h);
                        self.frags[mt][2 * kk + nt][reg]
                    });
                    b.pack(fmt, lo, hi)
                })
            })
            .collect()
    }

    /// [`AccTile::as_a`] of every m-tile, `[m-tile][k step]`.
    #[must_use]
    pub fn as_a_all(&self, b: &mut Builder, fmt: HalfFmt) -> Vec<Vec<[Reg<B32>; 4]>> {
        (0..self.m_tiles())
            .map(|mt| self.as_a(b, fmt, mt))
            .collect()
    }
}

/// `x = x * factor` with `assign`, for each register in order.
fn scale_regs(b: &mut Builder, regs: impl Iterator<Item = Reg<F32>>, factor: Reg<F32>) {
    for x in regs {
        let v = b.mul_f32(x, factor);
        b.assign(x, v);
    }
}

/// The C element (n-tile of the pair, register) at the place of A register `i`, half `h`
/// of a 16x16 block: same row and column, both maps from [`super::frag`].
fn a_source(i: u32, h: u32) -> (usize, usize) {
    let a = a_frag(i, h);
    let (row, col) = (a.row.constant(), a.col.constant());
    let nt = col / N_TILE_COLS;
    let reg = (0..REGS as u32)
        .find(|&e| {
            let c = c_frag(e);
            (c.row.constant(), c.col.constant()) == (row, col % N_TILE_COLS)
        })
        .expect("every A element is a C element");
    (nt as usize, reg as usize)
}

mod layout;
mod maps;

pub use layout::AccLayout;

#[cfg(test)]
mod tests;
