//! Tile layer: the accumulator tile's element-wise maps, in fragment order or column
//! by column, alone or zipped with a second tile of the same shape.

use super::{AccTile, Elem};
use crate::ptx::{Builder, F32, Reg};

impl AccTile {
    /// Replacing: every element `x` becomes `f(b, elem, x)`, in fragment order.
    pub fn map(
        &mut self,
        b: &mut Builder,
        mut f: impl FnMut(&mut Builder, Elem, Reg<F32>) -> Reg<F32>,
    ) {
        let same = self.clone();
        self.zip_map(b, &same, |b, el, x, _| f(b, el, x));
    }

    /// Replacing: every element `x` becomes `f(b, elem, x, other's element at elem)`, in
    /// fragment order (`other` as large).
    pub fn zip_map(
        &mut self,
        b: &mut Builder,
        other: &AccTile,
        mut f: impl FnMut(&mut Builder, Elem, Reg<F32>, Reg<F32>) -> Reg<F32>,
    ) {
        self.check_shape(other);
        for (mt, row) in self.frags.iter_mut().enumerate() {
            for (nt, frag) in row.iter_mut().enumerate() {
                for (e, x) in frag.iter_mut().enumerate() {
                    *x = f(b, Elem::of(mt, nt, e), *x, other.frags[mt][nt][e]);
                }
            }
        }
    }

    /// Replacing, in column order: for each n-tile, `v = col(b, n_tile)` first, then its
    /// elements of every m-tile (register order) become `f(b, elem, x, v)`.
    pub fn map_by_col<T: Copy>(
        &mut self,
        b: &mut Builder,
        col: impl FnMut(&mut Builder, usize) -> T,
        mut f: impl FnMut(&mut Builder, Elem, Reg<F32>, T) -> Reg<F32>,
    ) {
        let same = self.clone();
        self.zip_map_by_col(b, &same, col, |b, el, x, _, v| f(b, el, x, v));
    }

    /// [`AccTile::map_by_col`] with `other`'s element at the same place passed along.
    pub fn zip_map_by_col<T: Copy>(
        &mut self,
        b: &mut Builder,
        other: &AccTile,
        mut col: impl FnMut(&mut Builder, usize) -> T,
        mut f: impl FnMut(&mut Builder, Elem, Reg<F32>, Reg<F32>, T) -> Reg<F32>,
    ) {
        self.check_shape(other);
        for nt in 0..self.n_tiles() {
            let v = col(b, nt);
            for (mt, row) in self.frags.iter_mut().enumerate() {
                for (e, x) in row[nt].iter_mut().enumerate() {
                    *x = f(b, Elem::of(mt, nt, e), *x, other.frags[mt][nt][e], v);
                }
            }
        }
    }

    fn check_shape(&self, other: &AccTile) {
        let shape = |t: &AccTile| (t.m_tiles(), t.n_tiles());
        assert_eq!(shape(self), shape(other), "generator bug: tile shapes");
    }
}
