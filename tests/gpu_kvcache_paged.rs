//! GPU (feature `gpu`): the paged KV-cache forward (`forward_kvcache_paged_into`, the
//! fwdpaged split pass then the combine) against the f64 CPU reference, one group:
//!
//! - page sizes 1, 8, 16 (vLLM's), 32, 64, 128, 256 x head dims 40, 64, 128, 256 x both
//!   dtypes x causal and not, over decode (GQA 32/8, the runtime's split count),
//!   speculative verification (4 queries, MQA, 5 splits) and chunked prefill (129 queries,
//!   GQA 8/2, pages of 8 rows on: the prefill tiling at d128);
//! - seqlens_k edges (0, 1, odd, the capacity, -5, i32::MAX: clamped to [0, capacity]),
//!   `None`, and an empty table (max_pages 0).
//!
//! Every case: the page table a random permutation of the pool (never the identity),
//! sequences after the first sharing the first one's prefix pages, spare pages no table
//! points at, every pool row no sequence holds NaN, table entries past a sequence's pages
//! garbage (i32::MAX, -1, i32::MIN, 2^24); pools contiguous with exact buffers, or one
//! layer of a two-layer buffer with padded heads. Checked as `gpu_kvcache` checks (guard
//! bands, NaN, reference tolerances, determinism, allocating vs `_into`).
#![cfg(feature = "gpu")]

use flash_codegen::DType;

mod gpu_support;
mod kvcache_gpu;
use kvcache_gpu::{Case, Layout, Paging, run_group};

fn paging(page: usize, shared: usize, spare: usize) -> Option<Paging> {
    Some(Paging {
        page,
        shared,
        spare,
    })
}

#[test]
fn paged_kvcache_matches_f64_reference() {
    let mut v = Vec::new();
    let pages = [1, 8, 16, 32, 64, 128, 256];
    for (i, &d) in [64, 128, 256, 40].iter().enumerate() {
        for causal in [false, true] {
            for (j, &page) in pages.iter().enumerate() {
                let dtype = [DType::F16, DType::Bf16][(i + j + causal as usize) % 2];
                let layout = [Layout::Contiguous, Layout::Strided][(i + j) % 2];
                let base = Case {
                    layout,
                    ..Case::base(d, dtype, causal)
                };
                let cap = |keys: usize| keys.div_ceil(page) * page;
                let c1 = cap(1000);
                v.push(Case {
                    b: 4,
                    sq: 1,
                    cap: c1,
                    h: 32,
                    hk: 8,
                    lens: Some(vec![c1 as i32, 1, 517, 0]),
                    paged: paging(page, 3, 5),
                    ..base.clone()
                });
                let c2 = cap(777);
                v.push(Case {
                    b: 2,
                    sq: 4,
                    cap: c2,
                    h: 8,
                    hk: 1,
                    lens: Some(vec![600, 5]),
                    splits: Some(5),
                    paged: paging(page, 1, 0),
                    lse: j % 3 != 1,
                    ..base.clone()
                });
                if page >= 8 && d != 40 {
                    let c3 = cap(1500);
                    v.push(Case {
                        b: 2,
                        sq: 129,
                        cap: c3,
                        h: 8,
                        hk: 2,
                        lens: Some(vec![c3 as i32, 100]),
                        paged: paging(page, 2, 3),
                        ..base.clone()
                    });
                }
            }
        }
    }
    // seqlens_k edges and `None` at vLLM's page size; an empty table
    for (d, dtype) in [(128, DType::Bf16), (64, DType::F16)] {
        for causal in [false, true] {
            let base = Case {
                b: 6,
                cap: 320,
                h: 16,
                hk: 2,
                lens: Some(vec![0, 1, 77, 320, -5, i32::MAX]),
                paged: paging(16, 2, 1),
                ..Case::base(d, dtype, causal)
            };
            v.extend([
                Case {
                    sq: 1,
                    layout: Layout::Strided,
                    ..base.clone()
                },
                Case {
                    sq: 16,
                    splits: Some(3),
                    ..base.clone()
                },
                Case {
                    b: 2,
                    sq: 4,
                    lens: None,
                    ..base.clone()
                },
                Case {
                    b: 2,
                    sq: 3,
                    cap: 0,
                    lens: Some(vec![0, 5]),
                    ..base
                },
            ]);
        }
    }
    run_group("paged", &v);
}
