//! GPU (feature `gpu`): the KV-cache forward (`forward_kvcache_into`, split pass then
//! combine) against the f64 CPU reference (`reference::attention_kvcache_f64`), in four
//! groups, one `#[test]` each:
//!
//! - `matrix`: every kernel head dim and two that are not (40, 200) x f16/bf16 x causal
//!   and not x three shapes: decode (1 query) GQA 32/8, speculative (4 queries) MQA 8/1,
//!   16 queries MHA with a sequence shorter than the queries;
//! - `prefill`: chunked prefill, 129 queries against caches of 1500..4096;
//! - `seqlens`: seqlens_k of 0, 1, 77 (a multiple of no tile), the capacity, -5,
//!   i32::MAX, i32::MIN (these clamp to [0, capacity]), `None`, and a capacity of 0;
//! - `splits`: forced split counts 1, 2, 7, 128 and the automatic choice, split counts
//!   above the cache's key blocks (lowered) and above a short sequence's (empty splits).
//!
//! Every case: fresh random inputs (rounded to the dtype); q padded (NaN in the gaps) or
//! contiguous; the caches contiguous or strided views of larger buffers (rows past the
//! capacity, extra heads, a padded head stride, the view starting at row 2 / head 1),
//! every cache row at or past its sequence's length NaN (a cache holds garbage there);
//! o NaN inside a buffer whose other elements (the gaps of a padded view, a tail) hold a
//! sentinel; lse NaN between two sentinel bands, its view running past b*h*sq and
//! starting 4-byte (not 16-byte) aligned. Checked: no NaN left in o, every sentinel
//! intact, fully masked rows exactly 0 with lse -inf, o within gpu_fwd's rel-L2
//! tolerances, lse within 1e-3; a second identical call gives the same bits (o, lse and
//! both guard bands); the allocating `forward_kvcache` gives the same bits as `_into`.
//! `GPU_KV_D=64,128` limits the matrix's head dims.
#![cfg(feature = "gpu")]

use flash_codegen::DType;

mod gpu_support;
mod kvcache_gpu;
use kvcache_gpu::{Case, Layout, matrix_shapes, run_group};

const DTYPES: [DType; 2] = [DType::F16, DType::Bf16];

/// Head dims x dtypes x masks x three shapes.
fn matrix_cases() -> Vec<Case> {
    let dims: Vec<usize> = match std::env::var("GPU_KV_D") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![32, 64, 96, 128, 160, 192, 224, 256, 40, 200],
    };
    let mut v = Vec::new();
    for &d in &dims {
        for dtype in DTYPES {
            for causal in [false, true] {
                let base = Case::base(d, dtype, causal);
                let n = v.len();
                v.extend(matrix_shapes(base));
                // no lse on a rotating third of the cases
                let k = (n / 3) % 3;
                v[n + k].lse = false;
            }
        }
    }
    v
}

#[test]
fn kvcache_matrix_matches_f64_reference() {
    run_group("matrix", &matrix_cases());
}

/// Chunked prefill: 129 queries (three packed row blocks and more), GQA / MHA / MQA.
#[test]
fn kvcache_chunked_prefill_matches_f64_reference() {
    let mut v = Vec::new();
    for d in [64, 128, 256] {
        for causal in [false, true] {
            let dt = |i: usize| DTYPES[(i + d / 64 + causal as usize) % 2];
            v.extend([
                Case {
                    b: 3,
                    sq: 129,
                    cap: 2048,
                    h: 8,
                    hk: 2,
                    // 100 < 129: causal rows before the sequence start see nothing
                    lens: Some(vec![2048, 200, 100]),
                    layout: Layout::Strided,
                    ..Case::base(d, dt(0), causal)
                },
                Case {
                    b: 1,
                    sq: 129,
                    cap: 4096,
                    h: 8,
                    hk: 8,
                    splits: Some(1),
                    ..Case::base(d, dt(1), causal)
                },
                Case {
                    b: 2,
                    sq: 129,
                    cap: 1500,
                    h: 8,
                    hk: 1,
                    lens: Some(vec![1500, 129]),
                    splits: Some(3),
                    layout: Layout::Strided,
                    lse: d != 128,
                    ..Case::base(d, dt(2), causal)
                },
            ]);
        }
    }
    run_group("prefill", &v);
}

/// seqlens_k values at and past the edges (clamped to [0, capacity]), `None`, and a
/// capacity of 0.
#[test]
fn kvcache_seqlens_edges_match_f64_reference() {
    let lens = vec![0, 1, 77, 300, -5, i32::MAX, i32::MIN, 299];
    let mut v = Vec::new();
    for (d, dtype) in [(128, DType::Bf16), (64, DType::F16), (40, DType::Bf16)] {
        for causal in [false, true] {
            let base = Case {
                b: 8,
                cap: 300,
                h: 16,
                hk: 2,
                lens: Some(lens.clone()),
                ..Case::base(d, dtype, causal)
            };
            v.extend([
                Case {
                    sq: 1,
                    layout: Layout::Strided,
                    ..base.clone()
                },
                Case {
                    sq: 4,
                    splits: Some(3),
                    ..base.clone()
                },
                Case {
                    sq: 16,
                    splits: Some(1),
                    layout: Layout::Strided,
                    ..base.clone()
                },
                Case {
                    b: 2,
                    sq: 4,
                    lens: None,
                    layout: Layout::Strided,
                    ..base.clone()
                },
                // capacity 0: every row o = 0, lse = -inf (5 clamps to 0)
                Case {
                    b: 2,
                    sq: 3,
                    cap: 0,
                    h: 4,
                    hk: 2,
                    lens: Some(vec![0, 5]),
                    layout: Layout::Strided,
                    ..base.clone()
                },
                Case {
                    b: 2,
                    sq: 3,
                    cap: 0,
                    h: 4,
                    hk: 2,
                    lens: None,
                    splits: Some(4),
                    ..base
                },
            ]);
        }
    }
    run_group("seqlens", &v);
}

/// Forced split counts and the automatic one; counts above the key blocks.
#[test]
fn kvcache_split_counts_match_f64_reference() {
    let mut v = Vec::new();
    for dtype in DTYPES {
        for causal in [false, true] {
            // d128 (block_n 64): 47 key blocks, so 128 is lowered to 47
            for splits in [Some(1), Some(2), Some(7), Some(128), None] {
                v.push(Case {
                    b: 2,
                    sq: 4,
                    cap: 3000,
                    h: 8,
                    hk: 2,
                    lens: Some(vec![3000, 1234]),
                    splits,
                    layout: Layout::Strided,
                    ..Case::base(128, dtype, causal)
                });
            }
            // 128 splits kept (d256, block_n 32: 129 key blocks, 2 per split, the last
            // 63 splits of the first sequence empty and 96 of the second)
            v.push(Case {
                b: 2,
                sq: 1,
                cap: 4100,
                h: 4,
                hk: 1,
                lens: Some(vec![4100, 1000]),
                splits: Some(128),
                layout: Layout::Strided,
                ..Case::base(256, dtype, causal)
            });
            // one decode token, MQA 8/1 on a long cache: the automatic rule picks many
            // splits (one CTA per split otherwise)
            v.push(Case {
                b: 1,
                sq: 1,
                cap: 32768,
                h: 8,
                hk: 1,
                ..Case::base(64, dtype, causal)
            });
            v.extend([
                // 40 splits of 2 key blocks (d256, cap 64): lowered to 2
                Case {
                    b: 2,
                    sq: 7,
                    cap: 64,
                    h: 4,
                    hk: 2,
                    lens: Some(vec![64, 63]),
                    splits: Some(40),
                    ..Case::base(256, dtype, causal)
                },
                // 7 splits of 1 key block (d32, block_n 128): lowered to 1
                Case {
                    b: 2,
                    sq: 2,
                    cap: 100,
                    h: 4,
                    hk: 4,
                    lens: Some(vec![100, 50]),
                    splits: Some(7),
                    layout: Layout::Strided,
                    ..Case::base(32, dtype, causal)
                },
                // 17 packed rows (MHA, 17 queries): one more than the fewest-rows tiles
                // hold; 3 splits
                Case {
                    b: 2,
                    sq: 17,
                    cap: 500,
                    h: 2,
                    hk: 2,
                    lens: Some(vec![500, 10]),
                    splits: Some(3),
                    ..Case::base(96, dtype, causal)
                },
                // 16 splits of a 16-block cache whose sequences hold 3 and 1 keys: all but
                // the first split of each sequence empty (lse -inf partials)
                Case {
                    b: 2,
                    sq: 1,
                    cap: 2000,
                    h: 8,
                    hk: 2,
                    lens: Some(vec![3, 1]),
                    splits: Some(16),
                    layout: Layout::Strided,
                    ..Case::base(64, dtype, causal)
                },
            ]);
        }
    }
    run_group("splits", &v);
}
