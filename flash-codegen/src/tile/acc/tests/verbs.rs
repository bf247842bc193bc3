//! Host tests of the accumulator verbs against the hand-written loops the kernels used
//! before them (copied here as the references: same statements, same registers).

use super::*;

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
