//! The KV-cache forward's split rule and kernel choice, through the pure validate layer
//! (no GPU needed): the split counts fill the GPU, explicit counts are kept or refused,
//! the tilings (key-split, long, prefill; the combine's three) follow the packed rows and
//! the split count.

mod kvcache_support;

use flash_codegen::{KernelSpec, Mask as KMask, Pass, Tiling, Tuning};
use flash_runtime::FlashError;
use flash_runtime::validate::{GpuFill, ParamValue, num_splits_for};
use kvcache_support::{BF, H200, args, err, plan, slots, split_spec, with_splits};

/// The split rule (after FA3's), case by case.
#[test]
fn the_split_rule_fills_the_gpu() {
    // on the tiling the planner runs the problem on (key-split up to 16 packed rows)
    let rule = |b, sq, cap, h, hk, d, mask| {
        let spec = split_spec(KernelSpec::kernel_head_dim(d as u32).unwrap(), mask)
            .for_packed_rows(sq * (h / hk));
        num_splits_for(&spec, [b, sq, h, d], [b, cap, hk, d], H200)
    };
    // decode, b1, a 32K cache, d128, 8 KV heads: 8 CTAs per split, split to fill the GPU
    let n = rule(1, 1, 32768, 32, 8, 128, KMask::None);
    let fill = (8 * n) as f64 / slots(128, H200) as f64;
    assert!((0.85..=1.0).contains(&fill), "{n} splits fill {fill}");
    assert_eq!(rule(1, 1, 32768, 32, 8, 128, KMask::Causal), n);
    // the fullest single wave, not the first within 0.85 of it: 16 x 8 CTAs on 132 SMs
    assert_eq!(n, 16);
    // 64 CTAs (0.48 of the 132 slots) with 1-2 MiB of K and V each: unsplit; with
    // 32 MiB (128K keys): two splits
    assert_eq!(rule(8, 1, 4096, 32, 8, 64, KMask::None), 1);
    assert_eq!(rule(8, 1, 4096, 32, 8, 128, KMask::None), 1);
    assert_eq!(rule(64, 1, 4096, 8, 1, 64, KMask::None), 1);
    assert_eq!(rule(8, 1, 131072, 32, 8, 64, KMask::None), 2);
    // fewer CTAs than half the slots still split a short cache
    assert!(rule(4, 1, 4096, 32, 8, 128, KMask::None) > 1);
    // one KV head at batch 1: not a wave even at the most splits, so the most: 64, or
    // half the key blocks (4K keys: 64 blocks of 64)
    assert_eq!(rule(1, 1, 32768, 8, 1, 128, KMask::None), 64);
    assert_eq!(rule(1, 1, 4096, 8, 1, 128, KMask::None), 32);
    // b64 with a 4K cache: 512 CTAs already fill the GPU
    assert_eq!(rule(64, 1, 4096, 32, 8, 128, KMask::None), 1);
    // at most 4 key blocks: no split; 5: split
    let bn = split_spec(128, KMask::None).tiles().block_n() as usize;
    assert_eq!(rule(1, 1, 4 * bn, 32, 8, 128, KMask::None), 1);
    assert!(rule(1, 1, 4 * bn + 1, 32, 8, 128, KMask::None) > 1);
    assert_eq!(rule(1, 1, 0, 32, 8, 128, KMask::None), 1);
    // a full GPU whose KV head (1M keys, d128: 512 MiB) overflows L2, the queries sweeping
    // it at least twice: one split per 50 MiB; never causal
    let long = split_spec(128, KMask::None).with_tiling(Tiling::Prefill);
    let long_slots = u64::from(H200.sms) * u64::from(long.plan(&Tuning::NONE).ctas_per_sm_hint());
    let sq = 2 * long_slots as usize * long.tiles().block_m() as usize;
    assert_eq!(rule(1, sq, 1 << 20, 1, 1, 128, KMask::None), 11);
    assert_eq!(rule(1, sq, 1 << 20, 1, 1, 128, KMask::Causal), 1);
    assert_eq!(rule(1, sq / 2, 1 << 20, 1, 1, 128, KMask::None), 1);
    // empty problems and specs that are no fwdsplit kernel: 1
    assert_eq!(rule(0, 1, 32768, 32, 8, 128, KMask::None), 1);
    let mut fwd = split_spec(128, KMask::None);
    fwd.pass = Pass::Fwd;
    assert_eq!(
        num_splits_for(&fwd, [1, 1, 32, 128], [1, 32768, 8, 128], H200),
        1
    );
    // the chosen count always fits the grid's z limit, even on a huge GPU
    let huge = GpuFill {
        sms: 100_000,
        smem_optin: H200.smem_optin,
        smem_per_sm: H200.smem_per_sm,
    };
    let spec = split_spec(128, KMask::None);
    let n = num_splits_for(&spec, [1000, 1, 1, 128], [1000, 1 << 16, 1, 128], huge);
    assert!(n > 1 && 1000 * n <= 65535, "{n}");
    // and plans pick it up
    assert_eq!(
        plan(&args(1, 1, 32768, 32, 8, 128)).unwrap().num_splits,
        rule(1, 1, 32768, 32, 8, 128, KMask::None)
    );
}

/// An explicit count is kept, or lowered to the cache's key blocks (more would only add
/// empty splits); out of 1..=128 it is an error naming the range.
#[test]
fn explicit_splits_are_clamped_or_rejected() {
    let bn = split_spec(128, KMask::None).tiles().block_n() as usize;
    let splits = |cap, n| plan(&with_splits(args(1, 1, cap, 8, 8, 128), n)).map(|p| p.num_splits);
    assert_eq!(splits(32768, 7).unwrap(), 7);
    assert_eq!(splits(32768, 128).unwrap(), 128);
    assert_eq!(splits(3 * bn, 100).unwrap(), 3);
    assert_eq!(splits(3 * bn + 1, 100).unwrap(), 4);
    assert_eq!(splits(0, 16).unwrap(), 1);
    for n in [0, 129, u32::MAX] {
        let (e, msg) = err(&with_splits(args(1, 1, 4096, 8, 8, 128), n));
        assert!(matches!(e, FlashError::InvalidParam(_)), "{e:?}");
        assert!(
            msg.contains("1..=128") && msg.contains("KvOptions"),
            "{msg}"
        );
        // also on an empty problem: the value is wrong whatever the shapes
        let (e, _) = err(&with_splits(args(0, 1, 4096, 8, 8, 128), n));
        assert!(matches!(e, FlashError::InvalidParam(_)), "{e:?}");
    }
}

/// MQA decode: all query heads of the one KV head share a tile's rows.
#[test]
fn mqa_packs_the_heads_into_rows() {
    let p = plan(&with_splits(args(3, 4, 512, 32, 1, 128), 2)).unwrap();
    assert_eq!(p.split.grid, [2, 1, 6]); // 4 * 32 packed rows = two 64-row tiles
    // (the prefill row's 3 CTAs x 8 splits would not fill the GPU: the long row)
    assert_eq!(p.split.spec.tiling, Tiling::Long);
    assert_eq!(p.split.param("heads_per_kv"), Some(ParamValue::U32(32)));
    let combine = p.combine.unwrap();
    let rows_per_cta = combine.spec.tiles().block_m();
    assert_eq!(combine.grid, [(32 * 4u32).div_ceil(rows_per_cta), 3, 1]);
}

/// `kvcache_splits` (shapes alone) gives the split count the plan has, for the rule's
/// choice and for explicit counts, and refuses what the plan refuses.
#[test]
fn split_count_from_shapes_matches_the_plan() {
    use flash_codegen::Arch;
    use flash_runtime::validate::kvcache_splits;
    for (b, sq, cap, h, hk, d) in [
        (1, 1, 32768, 32, 8, 128),
        (1, 1, 4096, 8, 1, 64),
        (64, 1, 4096, 32, 8, 128),
        (2, 300, 2048, 8, 2, 96),
        (3, 1, 0, 4, 4, 256),
    ] {
        for n in [None, Some(1), Some(7), Some(128)] {
            let mut a = args(b, sq, cap, h, hk, d);
            a.num_splits = n;
            let want = plan(&a).unwrap().num_splits;
            let cache = (a.k.shape, None);
            let got = kvcache_splits(a.q.shape, cache, (BF, &a.params), n, Arch::Sm80, H200);
            assert_eq!(
                got.unwrap(),
                want,
                "b{b} sq{sq} cap{cap} {h}/{hk} d{d} {n:?}"
            );
        }
    }
    let a = args(1, 1, 64, 4, 4, 64);
    let shapes = (a.q.shape, a.k.shape);
    let bad = kvcache_splits(
        shapes.0,
        (shapes.1, None),
        (BF, &a.params),
        Some(0),
        Arch::Sm80,
        H200,
    );
    assert!(matches!(bad, Err(FlashError::InvalidParam(_))), "{bad:?}");
    let d = kvcache_splits(
        [1, 1, 4, 60],
        ([1, 64, 4, 60], None),
        (BF, &a.params),
        None,
        Arch::Sm80,
        H200,
    );
    assert!(
        matches!(d, Err(FlashError::UnsupportedHeadDim { head_dim: 60 })),
        "{d:?}"
    );
}

/// The prefill row (128-row tiles, d128) from 128 packed rows where its CTAs fill the GPU
/// at the rule's most splits; the long row where they would not; never at other head dims.
#[test]
fn the_prefill_row_runs_where_it_fills_the_gpu() {
    let tiling =
        |b, sq, cap, h, hk, d| plan(&args(b, sq, cap, h, hk, d)).unwrap().split.spec.tiling;
    // a chunked prefill: 512 rows x 8 heads against 8K keys
    assert_eq!(tiling(1, 512, 8192, 8, 8, 128), Tiling::Prefill);
    // 16 rows x 8 heads of one KV head: 1 CTA x 64 splits; at batch 8, 8 x 64
    assert_eq!(tiling(1, 16, 32768, 8, 1, 128), Tiling::Long);
    assert_eq!(tiling(8, 16, 32768, 8, 1, 128), Tiling::Prefill);
    // 127 packed rows: long; other head dims: long
    assert_eq!(tiling(8, 127, 32768, 8, 8, 128), Tiling::Long);
    assert_eq!(tiling(1, 512, 8192, 8, 8, 64), Tiling::Long);
    let p = plan(&args(1, 512, 8192, 8, 8, 128)).unwrap();
    assert_eq!(p.num_splits, 8);
    assert_eq!(p.split.spec.name(), "fa2_fwdsplit_d128_bf16_prefill_sm80");
    assert_eq!(
        p.combine.unwrap().spec.name(),
        "fa2_fwdcombine_d128_bf16_prefill_sm80"
    );
}
