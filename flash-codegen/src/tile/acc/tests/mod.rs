//! Host tests of the accumulator map, and of the verbs against the hand-written loops the
//! kernels used before them (copied here as the references: same statements, same
//! registers).

use super::*;
use crate::ptx::{Addr, LaunchBounds, LdCache, Param, Space, Stmt, Ty};
use crate::tile::frag::c_frag;
use std::collections::HashSet;

type Frags = Vec<Vec<[Reg<F32>; 4]>>;

/// The body and register counts `f` emits on a fresh builder.
fn emitted(f: impl FnOnce(&mut Builder)) -> (Vec<Stmt>, [u32; 5]) {
    let mut b = Builder::new();
    f(&mut b);
    let e = b.finish("t", Vec::<Param>::new(), LaunchBounds::default());
    (e.body, e.reg_counts)
}

/// (threads, rows, cols) of a layout.
fn extent(l: &AccLayout) -> (u32, u32, u32) {
    (
        32 * l.warps,
        16 * l.warps * l.m_tiles as u32,
        8 * l.n_tiles as u32,
    )
}

/// Asserts the verb and the reference emit the same statements: both start from the same
/// zero tile of `m_tiles` x `n_cols` and a few scalar registers `[f32; 3]` and `b32`.
fn same(
    (m_tiles, n_cols): (usize, u32),
    verb: impl FnOnce(&mut Builder, AccTile, [Reg<F32>; 3], Reg<B32>),
    reference: impl FnOnce(&mut Builder, Frags, [Reg<F32>; 3], Reg<B32>),
) {
    let setup = |b: &mut Builder| {
        let t = AccTile::zeros(b, m_tiles, n_cols);
        let s: [Reg<F32>; 3] = std::array::from_fn(|_| b.mov(ZERO));
        let i = b.mov(0u32);
        (t, s, i)
    };
    let got = emitted(|b| {
        let (t, s, i) = setup(b);
        verb(b, t, s, i)
    });
    let want = emitted(|b| {
        let (t, s, i) = setup(b);
        reference(b, t.frags, s, i)
    });
    assert!(
        got.0.len() > m_tiles * n_cols as usize / 2,
        "the setup alone"
    );
    assert_eq!(got, want);
}

const SHAPES: [(usize, u32); 4] = [(1, 16), (2, 64), (4, 32), (2, 128)];

/// (a) The mma map is c_frag's, and a bijection of the 32 lanes' registers onto the tile.
#[test]
fn mma_map_is_c_frag_and_a_bijection() {
    for (m_tiles, n_tiles) in [(1, 1), (1, 2), (2, 8), (4, 16), (2, 32)] {
        let l = AccLayout::mma(m_tiles, n_tiles);
        let (threads, rows, cols) = extent(&l);
        assert_eq!(threads, 32);
        let mut seen = HashSet::new();
        for lane in 0..32 {
            for mt in 0..m_tiles {
                for nt in 0..n_tiles {
                    for e in 0..4 {
                        let (row, col) = l.coord(lane, mt, nt, e);
                        let c = c_frag(e as u32);
                        assert_eq!(row, 16 * mt as u32 + c.row.eval(lane));
                        assert_eq!(col, 8 * nt as u32 + c.col.eval(lane));
                        assert!(row < rows && col < cols && seen.insert((row, col)));
                    }
                }
            }
        }
        assert_eq!(seen.len() as u32, rows * cols);
    }
}

/// (b) The wgmma map is ptx-reference §10.3's for every thread and d[v], a bijection onto
/// 64 x N, and the tile's fragment order is d[0..N/2]'s.
#[test]
fn wgmma_map_is_the_reference_formula_and_a_bijection() {
    for n in [8u32, 64, 128, 256] {
        let l = AccLayout::wgmma(n);
        assert_eq!(extent(&l), (128, 64, n));
        let (m_tiles, n_tiles) = (l.m_tiles, l.n_tiles);
        let mut b = Builder::new();
        let tile = AccTile::zeros(&mut b, m_tiles, n);
        let order: Vec<_> = tile.regs().collect();
        assert_eq!(order.len() as u32, n / 2);
        let mut seen = HashSet::new();
        for thread in 0..128u32 {
            let (w, lane) = (thread / 32, thread % 32);
            let (g, t) = (lane >> 2, lane & 3);
            let mut v = 0usize;
            for nt in 0..n_tiles {
                for e in 0..4 {
                    assert_eq!(AccLayout::wgmma_reg(nt, e), v);
                    assert_eq!(order[v], tile.frag(0, nt)[e]);
                    let vv = v as u32;
                    let row = 16 * w + g + 8 * ((vv >> 1) & 1);
                    let col = 8 * (vv >> 2) + 2 * t + (vv & 1);
                    assert_eq!(l.coord(thread, 0, nt, e), (row, col), "T{thread} d[{v}]");
                    assert!(seen.insert((row, col)));
                    v += 1;
                }
            }
            assert_eq!(v as u32, n / 2);
        }
        assert_eq!(seen.len() as u32, 64 * n);
    }
}

/// (c) Elem, row_offset, row_regs and pair agree with c_frag for every register.
#[test]
fn elems_agree_with_c_frag() {
    let mut b = Builder::new();
    let tile = AccTile::zeros(&mut b, 3, 32);
    for mt in 0..3 {
        for nt in 0..4 {
            for e in 0..4 {
                let el = Elem::of(mt, nt, e);
                let c = c_frag(e as u32);
                assert_eq!((el.m_tile(), el.n_tile, el.reg()), (mt, nt, e));
                assert_eq!(
                    AccTile::row_offset(el.row),
                    16 * mt as u32 + c.row.constant()
                );
                assert_eq!(el.col(), 8 * nt as u32 + c.col.constant());
                assert_eq!(tile.pair(el.row, nt)[el.pair], tile.frag(mt, nt)[e]);
            }
        }
    }
    for r in 0..tile.rows() {
        assert_eq!(AccTile::row_offset(r), 8 * r as u32);
        let want: Vec<_> = (0..4)
            .flat_map(|nt| (0..4).map(move |e| (nt, e)))
            .filter(|&(nt, e)| Elem::of(r / 2, nt, e).row == r)
            .map(|(nt, e)| tile.frag(r / 2, nt)[e])
            .collect();
        assert_eq!(tile.row_regs(r).collect::<Vec<_>>(), want);
    }
}

/// The A fragments as_a packs sit where the C elements they are made of sit, every lane.
#[test]
fn a_sources_are_the_same_elements() {
    for i in 0..4 {
        for h in 0..2 {
            let (nt, e) = a_source(i, h);
            for lane in 0..32 {
                let (a, c) = (a_frag(i, h), c_frag(e as u32));
                assert_eq!(a.row.eval(lane), c.row.eval(lane));
                assert_eq!(a.col.eval(lane), 8 * nt as u32 + c.col.eval(lane));
            }
        }
    }
}

/// Views share the registers; a replacing map on a view leaves the parent's handles.
#[test]
fn views_share_registers() {
    let mut b = Builder::new();
    let tile = AccTile::zeros(&mut b, 2, 64);
    let view = tile.m_tile(1).n_tiles_from(3, 4);
    assert_eq!((view.m_tiles(), view.n_tiles(), view.cols()), (1, 4, 32));
    assert_eq!(view.frag(0, 1), tile.frag(1, 4));
    let mut v2 = view.clone();
    v2.map(&mut b, |b, _, x| b.neg_f32(x));
    assert_ne!(v2.frag(0, 1), tile.frag(1, 4));
    assert_eq!(view.frag(0, 1), tile.frag(1, 4));
}

mod verbs;
