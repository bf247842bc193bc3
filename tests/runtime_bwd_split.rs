//! The grouped-query backward's split, through the pure validate layer (no GPU): how many
//! CTAs share a group ([`BwdOptions::group_splits`] or the automatic rule), the launches it
//! plans (`bwdkvsum` between the main pass and the last one), the main pass's grid and
//! parameters, and the partial buffer it needs.

use flash_codegen::{Arch, Pass};
use flash_runtime::validate::{
    BufDesc, BwdArgs, GpuFill, ParamValue, SPLIT_TARGET_CTAS_PER_SM, ScratchDesc, plan_bwd_fill,
    plan_bwd_varlen,
};
use flash_runtime::{AttnParams, BwdOptions, FlashError};

mod validate_support;
use validate_support::atomic_bwd_args as args;

/// An H200: 132 SMs, 227 KiB per block.
const H200: GpuFill = GpuFill {
    sms: 132,
    smem_optin: 227 * 1024,
    smem_per_sm: 228 * 1024,
};

fn with_opts(a: &BwdArgs<'static>, opts: BwdOptions) -> BwdArgs<'static> {
    BwdArgs { opts, ..*a }
}

/// The passes planned (a dry run: no scratch), the main pass's grid and its
/// group_split_shift.
fn plan_of(a: &BwdArgs, gpu: GpuFill) -> (Vec<Pass>, [u32; 3], u32) {
    let a = BwdArgs {
        scratch: None,
        ..*a
    };
    let p = plan_bwd_fill(&a, Arch::Sm80, true, gpu).unwrap();
    let passes = p.launches.iter().map(|l| l.spec.pass).collect();
    let main = p.launch(Pass::Bwd).unwrap();
    let shift = match main.param("group_split_shift") {
        Some(ParamValue::U32(s)) => s,
        v => panic!("group_split_shift = {v:?}"),
    };
    (passes, main.grid, shift)
}

/// Explicit counts: rounded down to a power of two, at most the group; one split plans the
/// three launches of before, more add bwdkvsum and multiply the main grid's y.
#[test]
fn explicit_counts_round_down_to_a_power_of_two_within_the_group() {
    use Pass::{Bwd, BwdKvSum, BwdPost, BwdPre};
    // group 7 (28 / 4 heads), 300 keys: 5 key blocks of 64 at d128
    let a = args(1, 257, 300, 28, 4, 128);
    for (asked, shift) in [
        (0, 0),
        (1, 0),
        (2, 1),
        (3, 1),
        (4, 2),
        (7, 2),
        (8, 2),
        (64, 2),
    ] {
        let a = with_opts(&a, BwdOptions::new().with_group_splits(asked));
        let (passes, grid, s) = plan_of(&a, H200);
        assert_eq!(s, shift, "asked {asked}");
        assert_eq!(grid[1], 4 << shift, "asked {asked}");
        let want: &[Pass] = match shift {
            0 => &[BwdPre, Bwd, BwdPost],
            _ => &[BwdPre, Bwd, BwdKvSum, BwdPost],
        };
        assert_eq!(passes, want, "asked {asked}");
    }
    // without GQA nothing splits, whatever is asked
    let mha = with_opts(
        &args(1, 64, 64, 4, 4, 64),
        BwdOptions::new().with_group_splits(4),
    );
    assert_eq!(plan_of(&mha, H200).2, 0);
}

/// The automatic rule: the fewest splits that give the main pass 8 CTAs per SM, within the
/// group; none where the grid is large already, and none when the SM count is unknown.
#[test]
fn the_automatic_split_fills_the_gpu() {
    assert_eq!(SPLIT_TARGET_CTAS_PER_SM, 8);
    // 32 / 8 heads, batch 1, 4K: 64 key blocks (d128) x 8 = 512 CTAs: x2 = 1024 < 1056, x4
    let a = args(1, 4096, 4096, 32, 8, 128);
    assert_eq!(plan_of(&a, H200).2, 2);
    // batch 4: 2048 CTAs unsplit
    assert_eq!(plan_of(&args(4, 4096, 4096, 32, 8, 128), H200).2, 0);
    // 28 / 4 at 4K, batch 1: 256 CTAs; 7 heads a group: 4 splits (8 would pass the group)
    assert_eq!(plan_of(&args(1, 4096, 4096, 28, 4, 128), H200).2, 2);
    // MQA 16 / 1, 128 keys: 2 CTAs; the whole group, 16 splits
    assert_eq!(plan_of(&args(1, 128, 128, 16, 1, 128), H200).2, 4);
    let unknown = GpuFill::per_block(u64::MAX);
    assert_eq!(plan_of(&args(1, 128, 128, 16, 1, 128), unknown).2, 0);
}

/// The partials: `splits * 2 * b * sk * hk * d` f32 in the scratch need, their pointer a
/// parameter of the main pass and of bwdkvsum; a scratch without them is an error that
/// names the buffer; deterministic mode splits too (bwdkvsum before bwddq).
#[test]
fn the_partials_are_scratch_the_plan_checks() {
    let (b, sq, sk, h, hk, d) = (2, 100, 300, 8, 2, 64);
    let opts = BwdOptions::new().with_group_splits(4);
    let dry = with_opts(&args(b, sq, sk, h, hk, d), opts);
    let plan = plan_bwd_fill(
        &BwdArgs {
            scratch: None,
            ..dry
        },
        Arch::Sm80,
        true,
        H200,
    )
    .unwrap();
    let need = 4 * 2 * b * sk * hk * d;
    assert_eq!(plan.scratch.dkv_partial, need);
    assert!(!plan.scratch_bound);

    // the atomic args' scratch has no partials: refused, naming the buffer
    let err = plan_bwd_fill(&dry, Arch::Sm80, true, H200).unwrap_err();
    assert!(
        matches!(err, FlashError::ScratchTooSmall { buffer: "dkv_partial", needed, available: 0 } if needed == need),
        "{err:?}"
    );
    let with = |len: usize| {
        let s = dry.scratch.unwrap();
        let partial = BufDesc {
            ptr: 0xc000_0000,
            len,
        };
        BwdArgs {
            scratch: Some(ScratchDesc {
                dkv_partial: Some(partial),
                ..s
            }),
            ..dry
        }
    };
    assert!(matches!(
        plan_bwd_fill(&with(need - 1), Arch::Sm80, true, H200),
        Err(FlashError::ScratchTooSmall {
            buffer: "dkv_partial",
            ..
        })
    ));
    let plan = plan_bwd_fill(&with(need), Arch::Sm80, true, H200).unwrap();
    let sum = plan.launch(Pass::BwdKvSum).unwrap();
    assert_eq!(sum.param("dkv_partial"), Some(ParamValue::U64(0xc000_0000)));
    assert_eq!(sum.param("group_split_shift"), Some(ParamValue::U32(2)));
    // one 64-row block of keys per CTA, per kv head and batch
    assert_eq!(sum.grid, [sk.div_ceil(64) as u32, hk as u32, b as u32]);
    let main = plan.launch(Pass::Bwd).unwrap();
    assert_eq!(
        main.param("dkv_partial"),
        Some(ParamValue::U64(0xc000_0000))
    );
    assert_eq!(main.param("heads"), Some(ParamValue::U32(h as u32)));

    let det = BwdArgs {
        opts: BwdOptions::deterministic().with_group_splits(4),
        ..with(need)
    };
    let passes: Vec<Pass> = plan_bwd_fill(&det, Arch::Sm80, true, H200)
        .unwrap()
        .launches
        .iter()
        .map(|l| l.spec.pass)
        .collect();
    assert_eq!(
        passes,
        [Pass::BwdPre, Pass::Bwd, Pass::BwdKvSum, Pass::BwdDq]
    );
}

/// The varlen backward has no split: its plan never has bwdkvsum nor partials.
#[test]
fn varlen_never_splits() {
    let (total_q, total_k, h, hk, d) = (300, 400, 8, 1, 64);
    let a = args(1, total_q, total_k, h, hk, d);
    let a = BwdArgs {
        scratch: None,
        params: AttnParams::new(),
        ..with_opts(&a, BwdOptions::new().with_group_splits(8))
    };
    let v = validate_support::two_sequences();
    let p = plan_bwd_varlen(&a, &v, Arch::Sm80, (9, 0)).unwrap();
    assert!(p.launch(Pass::BwdKvSum).is_none());
    assert_eq!(p.scratch.dkv_partial, 0);
}
