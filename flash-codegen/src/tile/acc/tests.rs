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

#[test]
fn zeros_is_softmax_zeros() {
    let want = emitted(|b| {
        let _: Frags = (0..2)
            .map(|_| {
                (0..4)
                    .map(|_| std::array::from_fn(|_| b.mov(ZERO)))
                    .collect()
            })
            .collect();
    });
    assert_eq!(emitted(|b| drop(AccTile::zeros(b, 2, 32))), want);
}

/// OnlineSoftmax::row_max, its rescale and normalise loops (scale_row), its exp loop.
#[test]
fn row_verbs_are_the_softmax_loops() {
    for shape in SHAPES {
        same(
            shape,
            |b, mut t, [m, sc, neg], _| {
                for r in 0..t.rows() {
                    let mx = t.row_max(b, r, m);
                    t.scale_row(b, r, mx);
                    let l = t.exp2_row(b, r, sc, neg, m);
                    let l = AccTile::quad_sum(b, l);
                    b.assign(m, l);
                }
            },
            |b, mut s, [m, sc, neg], _| {
                for row in 0..2 * s.len() {
                    let (mt, h) = (row / 2, row % 2);
                    let mut mx = m;
                    for frag in s[mt].iter() {
                        mx = b.max_f32(mx, frag[2 * h]);
                        mx = b.max_f32(mx, frag[2 * h + 1]);
                    }
                    let y = b.shfl_bfly_f32(mx, 1);
                    let mx = b.max_f32(mx, y);
                    let y = b.shfl_bfly_f32(mx, 2);
                    let mx = b.max_f32(mx, y);
                    for frag in &s[mt] {
                        for e in [2 * h, 2 * h + 1] {
                            let v = b.mul_f32(frag[e], mx);
                            b.assign(frag[e], v);
                        }
                    }
                    let mut l = m;
                    for frag in s[mt].iter_mut() {
                        for e in [2 * h, 2 * h + 1] {
                            let x = b.fma_f32(frag[e], sc, neg);
                            frag[e] = b.ex2(x);
                            l = b.add_f32(l, frag[e]);
                        }
                    }
                    let y = b.shfl_bfly_f32(l, 1);
                    let l = b.add_f32(l, y);
                    let y = b.shfl_bfly_f32(l, 2);
                    let l = b.add_f32(l, y);
                    b.assign(m, l);
                }
            },
        );
    }
}

/// KeyMask::apply (keep = Gt) and QueryMask::apply (keep = Le).
#[test]
fn mask_is_key_and_query_mask() {
    let mask = |b: &mut Builder,
                s: &Frags,
                cmp: Cmp,
                rel: &mut dyn FnMut(&mut Builder, usize) -> Reg<B32>| {
        for (mt, s_mt) in s.iter().enumerate() {
            for h in 0..2 {
                let rel = rel(b, 2 * mt + h);
                for (nt, frag) in s_mt.iter().enumerate() {
                    for e in [2 * h, 2 * h + 1] {
                        let col = 8 * nt as u32 + c_frag(e as u32).col.constant();
                        let valid = b.setp_s32(cmp, rel, col as i32);
                        let v = b.selp_f32(frag[e], NEG_INF, valid);
                        b.assign(frag[e], v);
                    }
                }
            }
        }
    };
    for shape in SHAPES {
        same(
            shape,
            |b, mut t, _, n0| t.mask(b, Cmp::Gt, |b, r| b.sub_s32(n0, r as i32)),
            |b, s, _, n0| mask(b, &s, Cmp::Gt, &mut |b, r| b.sub_s32(n0, r as i32)),
        );
        let query_rel = |b: &mut Builder, m0: Reg<B32>, r: usize| {
            let rel = b.sub_s32(m0, m0);
            b.add_s32(rel, AccTile::row_offset(r) as i32)
        };
        same(
            shape,
            |b, mut t, _, m0| t.mask(b, Cmp::Le, |b, r| query_rel(b, m0, r)),
            |b, s, _, m0| {
                mask(b, &s, Cmp::Le, &mut |b, r| {
                    let rel = b.sub_s32(m0, m0);
                    b.add_s32(rel, 8 * r as i32)
                })
            },
        );
    }
}

/// RowStats::probabilities (map) and RowStats::ds (zip_map) on per-row stats.
#[test]
fn maps_are_row_stats() {
    for shape in SHAPES {
        let stats = |b: &mut Builder, rows: usize| -> Vec<Reg<F32>> {
            (0..rows).map(|_| b.mov(ZERO)).collect()
        };
        same(
            shape,
            |b, mut s, [sc, ..], _| {
                let (lse, d) = (stats(b, s.rows()), stats(b, s.rows()));
                s.map(b, |b, el, x| {
                    let neg = b.neg_f32(lse[el.row]);
                    let y = b.fma_f32(x, sc, neg);
                    b.ex2(y)
                });
                let mut dp = AccTile::zeros(b, s.m_tiles(), s.cols());
                dp.zip_map(b, &s, |b, el, x, p| {
                    let diff = b.sub_f32(x, d[el.row]);
                    b.mul_f32(p, diff)
                });
                dp.scale(b, sc);
            },
            |b, mut s, [sc, ..], _| {
                let (lse, d) = (stats(b, 2 * s.len()), stats(b, 2 * s.len()));
                for (mt, s_mt) in s.iter_mut().enumerate() {
                    for frag in s_mt.iter_mut() {
                        for (e, x) in frag.iter_mut().enumerate() {
                            let neg = b.neg_f32(lse[2 * mt + e / 2]);
                            let y = b.fma_f32(*x, sc, neg);
                            *x = b.ex2(y);
                        }
                    }
                }
                let mut dp = AccTile::zeros(b, s.len(), 8 * s[0].len() as u32).frags;
                for (mt, (p_mt, dp_mt)) in s.iter().zip(dp.iter_mut()).enumerate() {
                    for (pf, df) in p_mt.iter().zip(dp_mt.iter_mut()) {
                        for e in 0..4 {
                            let diff = b.sub_f32(df[e], d[2 * mt + e / 2]);
                            df[e] = b.mul_f32(pf[e], diff);
                        }
                    }
                }
                for frag in dp.iter().flatten() {
                    for x in frag {
                        let v = b.mul_f32(*x, sc);
                        b.assign(*x, v);
                    }
                }
            },
        );
    }
}

/// ColStats::probabilities (map_by_col) and ColStats::ds (zip_map_by_col, with P^T's
/// n-tiles from `pt_nt0` through a view), per-column stats loaded per n-tile.
#[test]
fn column_maps_are_col_stats() {
    let pair = |b: &mut Builder, base: Reg<B32>, nt: usize| -> [Reg<F32>; 2] {
        b.ld(
            Space::Shared,
            LdCache::Default,
            Ty::F32,
            Addr::Shared(base, 32 * nt as i32),
        )
    };
    for shape in SHAPES {
        let (nt0, pt_nt0) = (1, shape.1 as usize / 16);
        let ds_cols = shape.1 / 2;
        same(
            shape,
            |b, mut pt, [sc, ..], base| {
                pt.map_by_col(
                    b,
                    |b, nt| pair(b, base, nt0 + nt).map(|l| b.neg_f32(l)),
                    |b, el, x, neg| {
                        let y = b.fma_f32(x, sc, neg[el.pair]);
                        b.ex2(y)
                    },
                );
                let mut ds = AccTile::zeros(b, pt.m_tiles(), ds_cols);
                let p = pt.n_tiles_from(pt_nt0, ds.n_tiles());
                ds.zip_map_by_col(
                    b,
                    &p,
                    |b, nt| pair(b, base, nt0 + nt),
                    |b, el, x, p, d| {
                        let diff = b.sub_f32(x, d[el.pair]);
                        b.mul_f32(p, diff)
                    },
                );
            },
            |b, mut pt, [sc, ..], base| {
                for nt in 0..pt[0].len() {
                    let neg = pair(b, base, nt0 + nt).map(|l| b.neg_f32(l));
                    for pt_mt in pt.iter_mut() {
                        for (e, x) in pt_mt[nt].iter_mut().enumerate() {
                            let y = b.fma_f32(*x, sc, neg[e & 1]);
                            *x = b.ex2(y);
                        }
                    }
                }
                let mut ds = AccTile::zeros(b, pt.len(), ds_cols).frags;
                for nt in 0..ds[0].len() {
                    let dcol = pair(b, base, nt0 + nt);
                    for (pt_mt, ds_mt) in pt.iter().zip(ds.iter_mut()) {
                        for e in 0..4 {
                            let diff = b.sub_f32(ds_mt[nt][e], dcol[e & 1]);
                            ds_mt[nt][e] = b.mul_f32(pt_mt[pt_nt0 + nt][e], diff);
                        }
                    }
                }
            },
        );
    }
}

/// p_as_a per m-tile (as_a, as_a_all) and the stores' packing of row pairs (pair).
#[test]
fn as_a_is_p_as_a() {
    for shape in SHAPES {
        for fmt in [HalfFmt::Bf16, HalfFmt::F16] {
            same(
                shape,
                |b, t, _, _| {
                    let _ = t.as_a_all(b, fmt);
                    let _ = t.as_a(b, fmt, t.m_tiles() - 1);
                    for r in 0..t.rows() {
                        for nt in 0..t.n_tiles() {
                            let [lo, hi] = t.pair(r, nt);
                            b.pack(fmt, lo, hi);
                        }
                    }
                },
                |b, s, _, _| {
                    let p_as_a = |b: &mut Builder, p: &[[Reg<F32>; 4]]| -> Vec<[Reg<B32>; 4]> {
                        p.chunks(2)
                            .map(|pair| {
                                let (lo, hi) = (pair[0], pair[1]);
                                [
                                    b.pack(fmt, lo[0], lo[1]),
                                    b.pack(fmt, lo[2], lo[3]),
                                    b.pack(fmt, hi[0], hi[1]),
                                    b.pack(fmt, hi[2], hi[3]),
                                ]
                            })
                            .collect()
                    };
                    let _: Vec<_> = s.iter().map(|p| p_as_a(b, p)).collect();
                    let _ = p_as_a(b, &s[s.len() - 1]);
                    for r in 0..2 * s.len() {
                        let (mt, h) = (r / 2, r % 2);
                        for frag in &s[mt] {
                            b.pack(fmt, frag[2 * h], frag[2 * h + 1]);
                        }
                    }
                },
            );
        }
    }
}
