//! GPU (feature `gpu`): the sliding window and the softcap in the KV-cache forwards
//! (`forward_kvcache_into` and `forward_kvcache_paged_into` with `AttnParams::with_window`
//! / `with_softcap`: the fwdsplit and fwdpaged `_local` and `_softcap` kernels, then the
//! combine) against the f64 reference (`reference::attention_kvcache_with`: each
//! sequence's window bottom-right against its own `seqlens_k` keys), through the harness
//! of `gpu_kvcache` (guard bands, NaN-poisoned outputs and cache rows past each sequence,
//! strided views, determinism, allocating vs `_into`).
//!
//! Windows: shorter than a key block, one key short of a block edge and on it, longer
//! than every sequence, right-sided (speculative rows seeing later keys), `(0, 0)` (the
//! diagonal key only); decode (1 query, GQA 32/8), speculative verification (4 and 16
//! queries, MQA and MHA), chunked prefill (129 queries: the long row); sequences of 0, 1,
//! odd and full lengths; the runtime's split count (sized for the window's reach) and
//! forced counts above the window's key blocks (empty splits). Caps 0.7, 5 (scale 1) and
//! 30/50 under no mask, the causal mask and windows. ALiBi (slopes `[heads]` and `[batch,
//! heads]`, each packed row its own head's slope) under no mask and the causal one, on the
//! same shapes and a chunked prefill. Every kernel head dim, both dtypes; pages of 1, 16
//! and 256 rows.
#![cfg(feature = "gpu")]

use flash_codegen::DType;

mod gpu_support;
mod kvcache_gpu;
use kvcache_gpu::{Case, Layout, Paging, matrix_shapes, run_group};

const DIMS: [usize; 9] = [64, 128, 256, 40, 96, 32, 160, 192, 224];

fn window_cases() -> Vec<Case> {
    let windows = [
        (100, 0),
        (127, 0),
        (128, 0),
        (63, 0),
        (0, 0),
        (5000, 0),
        (30, 2),
        (-1, 1),
        (255, -1),
    ];
    let mut v = Vec::new();
    for (i, &d) in DIMS.iter().enumerate() {
        for (j, &w) in windows.iter().enumerate() {
            let dtype = [DType::F16, DType::Bf16][(i + j) % 2];
            for (k, mut c) in matrix_shapes(Case::base(d, dtype, false))
                .into_iter()
                .enumerate()
            {
                if (i + j + k) % 3 == 2 && d > 64 {
                    continue; // (a third of the wide head dims' cases: the run's time)
                }
                c.window = Some(w);
                v.push(c);
            }
        }
    }
    // the runtime's split count on a long cache (sized for the window, not the capacity),
    // and forced counts above the window's key blocks: most splits empty
    for (d, w, splits) in [
        (128, (4095, 0), None),
        (64, (1023, 0), None),
        (128, (200, 0), Some(64)),
        (64, (31, 0), Some(7)),
    ] {
        v.push(Case {
            b: 2,
            sq: 1,
            cap: 32768,
            h: 16,
            hk: 2,
            lens: Some(vec![32768, 9000]),
            splits,
            window: Some(w),
            ..Case::base(d, DType::Bf16, false)
        });
    }
    // chunked prefill: 129 queries (the long row: windows have no prefill tile)
    for (d, w) in [(128, (64, 0)), (64, (300, 16)), (256, (1000, 0))] {
        v.push(Case {
            b: 3,
            sq: 129,
            cap: 2048,
            h: 8,
            hk: 2,
            lens: Some(vec![2048, 200, 100]),
            layout: Layout::Strided,
            window: Some(w),
            ..Case::base(d, DType::F16, false)
        });
    }
    v
}

fn softcap_cases() -> Vec<Case> {
    let caps = [(0.7, None), (5.0, Some(1.0)), (30.0, None), (50.0, None)];
    let masks = [
        (false, None),
        (true, None),
        (false, Some((100, 0))),
        (false, Some((63, 2))),
    ];
    let mut v = Vec::new();
    for (i, &d) in DIMS.iter().enumerate() {
        for (j, &(causal, window)) in masks.iter().enumerate() {
            let dtype = [DType::F16, DType::Bf16][(i + j / 2) % 2];
            for (k, mut c) in matrix_shapes(Case::base(d, dtype, causal))
                .into_iter()
                .enumerate()
            {
                c.window = window;
                c.softcap = Some(caps[(i + j + k) % caps.len()]);
                v.push(c);
            }
        }
    }
    // chunked prefill under a causal softcap (the long row)
    v.push(Case {
        b: 2,
        sq: 129,
        cap: 1500,
        h: 8,
        hk: 1,
        lens: Some(vec![1500, 129]),
        splits: Some(3),
        softcap: Some((30.0, None)),
        ..Case::base(128, DType::Bf16, true)
    });
    v
}

fn alibi_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (i, &d) in DIMS.iter().enumerate() {
        for causal in [false, true] {
            let dtype = [DType::F16, DType::Bf16][(i + causal as usize) % 2];
            for (k, mut c) in matrix_shapes(Case::base(d, dtype, causal))
                .into_iter()
                .enumerate()
            {
                c.alibi = Some((i + k) % 2 == 0);
                v.push(c);
            }
        }
    }
    // chunked prefill (the long row), GQA 8:1, per-sequence slopes
    v.push(Case {
        b: 2,
        sq: 129,
        cap: 1500,
        h: 8,
        hk: 1,
        lens: Some(vec![1500, 129]),
        splits: Some(3),
        alibi: Some(true),
        ..Case::base(128, DType::Bf16, true)
    });
    v
}

fn paged_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (i, &page) in [1usize, 16, 256].iter().enumerate() {
        for (j, &d) in [64, 128, 256].iter().enumerate() {
            let cap = 1000usize.div_ceil(page) * page;
            let dtype = [DType::F16, DType::Bf16][(i + j) % 2];
            let paged = Some(Paging {
                page,
                shared: 3.min(cap / page),
                spare: 5,
            });
            for (window, softcap, alibi) in [
                (Some((127, 0)), None, None),
                (Some((500, 0)), Some((50.0, None)), None),
                (None, Some((5.0, Some(1.0))), None),
                (None, None, Some(j % 2 == 0)),
            ] {
                v.push(Case {
                    b: 4,
                    sq: 1,
                    cap,
                    h: 32,
                    hk: 8,
                    lens: Some(vec![cap as i32, 1, 517, 0]),
                    layout: [Layout::Contiguous, Layout::Strided][(i + j) % 2],
                    paged,
                    window,
                    softcap,
                    alibi,
                    ..Case::base(d, dtype, false)
                });
            }
        }
    }
    v
}

#[test]
fn kvcache_windows_match_f64_reference() {
    run_group("window", &window_cases());
}

#[test]
fn kvcache_softcaps_match_f64_reference() {
    run_group("softcap", &softcap_cases());
}

#[test]
fn kvcache_alibi_matches_f64_reference() {
    run_group("alibi", &alibi_cases());
}

#[test]
fn paged_kvcache_modifiers_match_f64_reference() {
    run_group("paged-mods", &paged_cases());
}
