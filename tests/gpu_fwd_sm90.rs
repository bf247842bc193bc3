//! GPU (feature `gpu`, compute capability 9.0): the first sm_90a forward
//! (`kernels::sm90::fwd` through `FlashAttention::launch_fwd_sm90`) against the float64
//! reference, beside the sm80 forward's error on the same inputs (issue 22's bar: at most
//! 1.25x). Fresh random inputs per case; o poisoned (NaN) with a guard band past its end
//! and lse poisoned; odd lengths, sq != sk both ways, seqlen 1, GQA 16:1, causal rows with
//! no key (sq > sk), both dtypes, d64 and d128. The debug build (bounded mbarrier waits)
//! runs first, so a protocol error fails with the barrier's name instead of hanging.
//! Every schedule of `Variant::SCHEDULES` runs, the shipping one also with the TMA
//! epilogue (`tma_store`: o through shared memory and a tensor map), alone, with each
//! next tile's Q loaded early (`q_ahead`) and, on the window cases, with one mask pass per
//! window edge crossed (`edge_masks`); the chained one also with the TMA epilogue.
//! Other GPUs: a notice.
#![cfg(feature = "gpu")]

mod gpu_support;

use flash_runtime::reference::Modifiers;
use flash_runtime::{AttnParams, Element, FlashAttention, ForwardArch, Mask, Sm90FwdShape};
use gpu_support::attn_params;
use gpu_support::sm90::Sm90Case;

/// (o rel-L2, lse max abs error) of the sm90 kernel and of the sm80 forward.
fn case<T: Element>(rt: &FlashAttention, sh: Sm90FwdShape, seed: u64) -> ((f64, f64), (f64, f64)) {
    let mut c = Sm90Case::<T>::new(rt, sh, seed);
    rt.launch_fwd_sm90(&c.stream, sh, &c.q, &c.k, &c.v, &mut c.o, Some(&mut c.lse))
        .unwrap_or_else(|e| panic!("{sh:?}: {e}"));
    let (o, lse) = c.outputs();
    let bound = |x: u32| if x == u32::MAX { -1 } else { i64::from(x) };
    let mods = match sh.window {
        Some((l, r)) => Modifiers::default().with_window(bound(l), bound(r)),
        None => Modifiers::causal(sh.causal),
    };
    let r = c.reference(&mods);
    // the sm80 forward on the same inputs
    let params = match sh.window {
        Some((l, r)) => AttnParams::new().with_mask(Mask::Window {
            left: bound(l) as i32,
            right: bound(r) as i32,
        }),
        None => attn_params(sh.causal, None),
    };
    (c.errors(&r, (&o, &lse)), c.sm80_errors(rt, &params, &r))
}

#[test]
fn sm90_forward_matches_f64_reference() {
    let mut rt = gpu_support::device();
    rt.set_forward_arch(ForwardArch::Sm80); // `forward`, the baseline: the sm80 kernels
    if rt.compute_capability() != (9, 0) {
        println!(
            "NOTICE: the sm_90a forward needs compute capability 9.0; this GPU is {:?}",
            rt.compute_capability()
        );
        return;
    }
    // (b, sq, sk, h, hk, causal)
    let shapes = [
        (2, 256, 256, 4, 4, false),
        (1, 1000, 1000, 4, 2, true),
        (2, 129, 700, 16, 1, false),
        (1, 700, 129, 2, 2, true),
        (1, 1, 513, 4, 4, false),
        (1, 333, 1, 2, 1, true),
        (3, 77, 77, 2, 2, true),
        (1, 2048, 2048, 2, 2, true),
        // more tiles than any Hopper has SMs (114-132): a persistent CTA walks several,
        // its Q slots and rings reused; causal with sq >> sk: tiles with no key block
        (8, 130, 130, 20, 4, false),
        (2, 400, 64, 40, 8, true),
        // causal, sk > sq, GQA 4:1: every tile has keys, two or three per CTA (chained:
        // each edge's first block masked)
        (4, 300, 420, 24, 6, true),
    ];
    // sliding windows (left, right; MAX = unbounded), each against the sm80 window kernel:
    // (b, sq, sk, h, hk, window)
    const U: u32 = u32::MAX;
    let windows = [
        (2, 1000, 1000, 4, 2, (256, 0)),
        (1, 1000, 1000, 4, 2, (U, 0)),
        (1, 700, 900, 4, 4, (128, 128)),
        // sq > sk: rows whose window holds no key
        (1, 900, 300, 2, 1, (100, 37)),
        (2, 513, 513, 4, 4, (U, 64)),
        // wider than the sequence
        (1, 300, 2000, 4, 2, (5000, U)),
        // the diagonal alone, several tiles per persistent CTA
        (4, 300, 420, 24, 6, (0, 0)),
        // long keys: every tile starts past key block 0
        (1, 64, 4096, 2, 2, (200, 10)),
        // Mistral's 1024 keys: a tile's visits at the right edge, clean, at the left edge
        (1, 1536, 1536, 2, 2, (1023, 0)),
    ];
    // the cases: the shapes, then the windows
    let cases: Vec<_> = shapes
        .iter()
        .map(|&(b, sq, sk, h, hk, causal)| (b, sq, sk, h, hk, causal, None))
        .chain(
            windows
                .iter()
                .map(|&(b, sq, sk, h, hk, w)| (b, sq, sk, h, hk, false, Some(w))),
        )
        .collect();
    // GPU_FWD_SM90_SHAPES=n: the first n cases only, or =i,j,..: those (0-based), release
    // build only (the sanitizer runs of scripts/sm90_all.sh)
    let (picked, builds): (Vec<usize>, _) = match std::env::var("GPU_FWD_SM90_SHAPES") {
        Ok(n) if n.contains(',') => (
            n.split(',')
                .map(|i| i.trim().parse().expect("GPU_FWD_SM90_SHAPES: indices"))
                .collect(),
            vec![false],
        ),
        Ok(n) => (
            (0..n.parse().expect("GPU_FWD_SM90_SHAPES: a count")).collect(),
            vec![false],
        ),
        Err(_) => ((0..cases.len()).collect(), vec![true, false]),
    };
    // GPU_FWD_SM90_SCHEDULES=i,j,..: those of `Variant::SCHEDULES` only (0-based)
    let all = flash_codegen::kernels::sm90::fwd::Variant::SCHEDULES;
    let schedules: Vec<_> = match std::env::var("GPU_FWD_SM90_SCHEDULES") {
        Ok(list) => list
            .split(',')
            .map(|i| {
                all[i
                    .trim()
                    .parse::<usize>()
                    .expect("GPU_FWD_SM90_SCHEDULES: indices")]
            })
            .collect(),
        Err(_) => all.to_vec(),
    };
    // each schedule with the pair stores, the shipping one also with the TMA epilogue
    // (tma_store), alone, with each next tile's Q loaded early (q_ahead) and, on the
    // window cases, with one mask pass per window edge crossed (edge_masks); the chained
    // one also with the TMA epilogue
    let schedules: Vec<_> = schedules
        .into_iter()
        .flat_map(|s| {
            let (.., dynamic, chained) = s;
            let extra: &[(bool, bool, bool)] = if dynamic && !chained {
                &[
                    (false, false, false),
                    (true, false, false),
                    (true, true, false),
                    (true, false, true),
                ]
            } else if chained {
                &[(false, false, false), (true, false, false)]
            } else {
                &[(false, false, false)]
            };
            extra.iter().map(move |&t| (s, t))
        })
        .collect();
    let mut bad = Vec::new();
    let mut ratios = Vec::new();
    let mut seed = 1;
    // (head dim, consumer warpgroups): the defaults, and d64 with two consumers too
    let tiles = [(64, 3), (64, 2), (128, 2)];
    for debug in builds {
        for (
            ((overlap, pingpong, persistent, dynamic, chained), (tma_store, q_ahead, edge_masks)),
            (d, consumers),
        ) in schedules
            .iter()
            .flat_map(|&s| tiles.into_iter().map(move |t| (s, t)))
        {
            for &(b, sq, sk, h, hk, causal, window) in picked.iter().filter_map(|&i| cases.get(i)) {
                if edge_masks && window.is_none() {
                    continue;
                }
                let sh = Sm90FwdShape {
                    batch: b,
                    seqlen_q: sq,
                    seqlen_k: sk,
                    heads: h,
                    heads_k: hk,
                    head_dim: d,
                    causal,
                    window,
                    scores: flash_codegen::Scores::Plain,
                    fma_exp2: None,
                    fixed_ref: false,
                    overlap,
                    pingpong,
                    consumers: Some(consumers),
                    persistent,
                    dynamic,
                    chained,
                    tma_store,
                    q_ahead,
                    edge_masks,
                    debug,
                };
                for bf16 in [false, true] {
                    seed += 1;
                    let ((o, l), (o80, l80)) = if bf16 {
                        case::<half::bf16>(&rt, sh, seed)
                    } else {
                        case::<half::f16>(&rt, sh, seed)
                    };
                    let tol = if bf16 { 2e-2 } else { 4e-3 };
                    // the 1.25x bar against the sm80 kernel's error on the same inputs;
                    // outputs of a few hundred elements (seqlen_q 1) get 1.5x, their
                    // rel-L2 moving by 10-40% with the summation order alone, and the
                    // geometric mean over every case is held to 1.05x below
                    let elems = sh.batch * sh.seqlen_q * sh.heads * sh.head_dim;
                    let bar = if elems < 4096 { 1.5 } else { 1.25 };
                    let ok = o <= tol && o <= bar * o80.max(1e-4) && l <= 1e-3;
                    if o80 > 0.0 {
                        ratios.push((o / o80).ln());
                    }
                    println!(
                        "{} {sh:?}: o rel-L2 {o:.2e} (sm80 {o80:.2e}) lse {l:.2e} (sm80 {l80:.2e}){}",
                        if bf16 { "bf16" } else { "f16" },
                        if ok { "" } else { "  FAIL" }
                    );
                    if !ok {
                        bad.push(format!(
                            "{sh:?} bf16={bf16}: o {o:.2e} (sm80 {o80:.2e}) lse {l:.2e}"
                        ));
                    }
                }
            }
        }
    }
    let geomean = (ratios.iter().sum::<f64>() / ratios.len().max(1) as f64).exp();
    println!(
        "o error / sm80's: geometric mean {geomean:.3} over {} cases",
        ratios.len()
    );
    if geomean > 1.05 {
        bad.push(format!(
            "o error / sm80's: geometric mean {geomean:.3} > 1.05"
        ));
    }
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
