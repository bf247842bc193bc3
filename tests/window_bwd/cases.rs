//! The cases of `gpu_window_bwd`: the dense backward's windows (block-edge, one-sided,
//! wider than the sequence, rows and keys without partners, 8192 queries on the d128
//! long row and on the standard one) and softcaps (plain, causal, windowed), and the
//! varlen backward's over one mixed batch.

use flash_codegen::DType;

use super::Case;

pub fn dense_cases() -> Vec<Case> {
    // (window, b, sq, sk, h, hk)
    let shapes: [((i32, i32), usize, usize, usize, usize, usize); 12] = [
        ((100, 0), 2, 700, 700, 4, 2),     // local causal, crosses block edges
        ((127, 0), 1, 1024, 1024, 4, 4),   // aligned with 128-key blocks
        ((63, 0), 1, 600, 600, 2, 2),      // aligned with 64-key blocks
        ((64, 64), 1, 513, 513, 2, 1),     // two-sided, MQA
        ((0, 0), 1, 300, 300, 2, 2),       // the diagonal key only
        ((-1, 3), 1, 200, 333, 4, 2),      // right only, sq < sk
        ((5, -1), 1, 333, 200, 4, 2),      // left only, sq > sk
        ((4096, 4096), 2, 150, 170, 2, 1), // wider than the sequence
        ((3, 0), 1, 300, 100, 2, 2),       // sq > sk: the first rows see no key
        ((30, 0), 1, 97, 1500, 2, 2),      // sq < sk: early key blocks see no query
        ((126, 1), 1, 600, 600, 2, 2),     // one key short of a block edge
        ((1000, 0), 1, 2049, 2049, 2, 1),
    ];
    let mut v = Vec::new();
    for (i, d) in [64, 128, 40, 96, 256, 32, 160, 192, 224]
        .into_iter()
        .enumerate()
    {
        for (j, &(window, b, sq, sk, h, hk)) in shapes.iter().enumerate() {
            if (i + j) % 2 == 1 && d != 64 && d != 128 {
                continue; // (half the shapes at the other head dims: the run's time)
            }
            v.push(Case {
                d,
                dtype: [DType::F16, DType::Bf16][(i + j) % 2],
                window,
                lens: vec![(sq, sk)],
                b,
                h,
                hk,
                varlen: false,
                det: (i + j) % 2 == 0,
                softcap: None,
            });
        }
    }
    // one d128 head of 8192 queries in atomic mode
    let long = |dtype, window, softcap| Case {
        d: 128,
        dtype,
        window,
        lens: vec![(8192, 8192)],
        b: 1,
        h: 1,
        hk: 1,
        varlen: false,
        det: false,
        softcap,
    };
    // the long row under a window reaching 4096 keys (`validate::LONG_MIN_WINDOW_REACH`),
    // the standard row under a 512-key window
    for window in [(4095, 0), (511, 0)] {
        v.push(long(DType::Bf16, window, None));
    }
    // the softcap: plain, causal and windowed scores, caps that bite (0.7; 5 on scores
    // of unit scale) and one that barely does (30); the d128 long row with a cap
    let caps = [(0.7, None), (5.0, Some(1.0)), (30.0, None)];
    let masks = [(-1, -1), (-1, 0), (100, 0), (63, 2)];
    let shapes = [
        (2, 300, 300, 4, 2),
        (1, 513, 700, 2, 1),
        (1, 333, 200, 4, 4),
    ];
    for (i, d) in [64, 128, 40, 96, 256, 32, 160, 192, 224]
        .into_iter()
        .enumerate()
    {
        for (j, &window) in masks.iter().enumerate() {
            let (b, sq, sk, h, hk) = shapes[(i + j) % 3];
            v.push(Case {
                d,
                dtype: [DType::F16, DType::Bf16][(i + j / 2) % 2],
                window,
                lens: vec![(sq, sk)],
                b,
                h,
                hk,
                varlen: false,
                det: (i + j) % 2 == 1,
                softcap: Some(caps[(i + j) % 3]),
            });
        }
    }
    v.push(long(DType::F16, (-1, 0), Some((30.0, None))));
    v
}

pub fn varlen_cases() -> Vec<Case> {
    let mixed = vec![
        (0, 0),
        (1, 1),
        (77, 300),
        (3, 0),
        (513, 513),
        (0, 5),
        (200, 129),
        (700, 650),
    ];
    let mut v = Vec::new();
    for (i, d) in [64, 128, 96, 40, 256].into_iter().enumerate() {
        for (j, window) in [(100, 0), (63, 2), (-1, 5), (0, 0)].into_iter().enumerate() {
            v.push(Case {
                d,
                dtype: [DType::F16, DType::Bf16][(i + j) % 2],
                window,
                lens: mixed.clone(),
                b: mixed.len(),
                h: [8, 4, 6][(i + j) % 3],
                hk: [2, 4, 1][(i + j) % 3],
                varlen: true,
                det: j % 2 == 0,
                softcap: None,
            });
        }
        // the softcap: unmasked, causal and windowed (d128: the two-sweep row on sm_80)
        for (j, window) in [(-1, -1), (-1, 0), (100, 0)].into_iter().enumerate() {
            v.push(Case {
                d,
                dtype: [DType::Bf16, DType::F16][(i + j) % 2],
                window,
                lens: mixed.clone(),
                b: mixed.len(),
                h: [8, 4, 6][(i + j) % 3],
                hk: [2, 4, 1][(i + j) % 3],
                varlen: true,
                det: j % 2 == 1,
                softcap: Some([(0.7, None), (5.0, Some(1.0)), (30.0, None)][(i + j) % 3]),
            });
        }
    }
    v
}
