//! The backward main pass's row ([`main_spec`]), the grouped-query split: how many CTAs
//! share each (key block, kv head)'s query heads in the main pass ([`group_split_shift`]),
//! and the scratch a call needs with it ([`bwd_scratch_need`]).

use flash_codegen::{Arch, KernelSpec, Mask, Pass, Tiling};

use super::ScratchNeed;
use super::split_rule::GpuFill;
use crate::error::{FlashError, Result};
use crate::params::BwdOptions;

/// The fewest keys a sliding window must reach (`left + right + 1`) for its backward to
/// run the long row (in atomic mode, from [`KernelSpec::long_from`] query rows on); a
/// shorter window runs the standard row at any length. On an H100 (bf16, d128, 8K and
/// 32K, session 33; docs/performance.md) the standard row took 0.85x the long row's time
/// at window 256 and 0.94x at 1024 (2048: a tie, 0.96x at 8K, 1.01x at 32K), the long
/// row 0.94x the standard's at 4096 on 32K (1.01x on 8K): a key block that few query
/// blocks see pays the long row's larger block and fewer CTAs without its fewer atomics
/// per FLOP paying back.
pub const LONG_MIN_WINDOW_REACH: u64 = 4096;

/// The query rows the main pass's tile rule counts for a call of `seqlen_q` rows under
/// `window` (`AttnParams::window_params`: `u32::MAX` where a side is unbounded): a
/// window reaching fewer than [`LONG_MIN_WINDOW_REACH`] keys counts its reach (so runs
/// the standard row), anything else its rows.
pub fn rule_rows(seqlen_q: usize, window: Option<(u32, u32)>) -> usize {
    match window {
        Some((left, right)) => {
            let reach = u64::from(left) + u64::from(right) + 1;
            match reach < LONG_MIN_WINDOW_REACH {
                true => seqlen_q.min(reach as usize),
                false => seqlen_q,
            }
        }
        None => seqlen_q,
    }
}

/// The main pass (`base`: its standard row) of a call with `seqlen_q` query rows in
/// `opts`' mode on `gpu`: on [`BwdOptions::tiling`] where that is given (checked: a row
/// of this pass, fitting `gpu.smem_optin`, the long one in atomic mode only); else the
/// runtime's rule: with `speed_rows` (the rows chosen for speed alone, which a runtime
/// without their PTX skips) the long row from its threshold in atomic mode
/// ([`KernelSpec::for_seqlen`]), the compact row where the shared memory per block needs
/// it ([`KernelSpec::for_smem`]), then with `speed_rows` the compact row where it keeps
/// more warps per SM ([`KernelSpec::for_smem_per_sm`]).
pub(crate) fn main_spec(
    base: KernelSpec,
    seqlen_q: usize,
    speed_rows: bool,
    opts: &BwdOptions,
    gpu: GpuFill,
) -> Result<KernelSpec> {
    let Some(tiling) = opts.tiling else {
        let spec = base
            .for_seqlen(seqlen_q, speed_rows && !opts.deterministic)
            .for_smem(gpu.smem_optin);
        return Ok(match speed_rows {
            true => spec.for_smem_per_sm(gpu.smem_per_sm, gpu.smem_optin),
            false => spec,
        });
    };
    let spec = base.with_tiling(tiling);
    let rows = || {
        let names: Vec<String> = base.tilings().map(|s| format!("{:?}", s.tiling)).collect();
        names.join(", ")
    };
    let why = if !spec.is_supported() {
        format!("{base} has no {tiling:?} row (it has: {})", rows())
    } else if u64::from(spec.smem_bytes()) > gpu.smem_optin {
        format!(
            "{spec} needs {} bytes of shared memory per block, this GPU allows {}",
            spec.smem_bytes(),
            gpu.smem_optin
        )
    } else if tiling == Tiling::Long && opts.deterministic {
        "the long row runs in atomic mode only (its dQ goes through dq_accum)".to_string()
    } else {
        return Ok(spec);
    };
    Err(FlashError::InvalidParam(format!(
        "BwdOptions::tiling: {why}"
    )))
}

/// The power of two of group splits the main pass runs with (its
/// [`flash_codegen::abi::GROUP_SPLIT_SHIFT`]): at most the group (`heads / heads_k`) and at most
/// `opts.group_splits` when given. Automatic (`None`), with `sms` streaming
/// multiprocessors (0: unknown, one split): the fewest splits that give the main pass
/// [`SPLIT_TARGET_CTAS_PER_SM`] CTAs per SM, `ctas = ceil(seqlen_k / block_n) * heads_k *
/// batch` of them unsplit.
pub fn group_split_shift(
    main: &KernelSpec,
    k_shape: [usize; 4],
    group: usize,
    opts: &BwdOptions,
    sms: u32,
) -> u32 {
    let cap = match opts.group_splits {
        Some(n) => (n.max(1) as usize).min(group),
        None if sms == 0 => 1,
        None => {
            let [b, sk, hk, _] = k_shape;
            let ctas = sk
                .div_ceil(main.tiles().block_n() as usize)
                .saturating_mul(hk)
                .saturating_mul(b);
            let want = (sms as usize).saturating_mul(SPLIT_TARGET_CTAS_PER_SM);
            let mut s = 1;
            while s < group && ctas.saturating_mul(s) < want {
                s *= 2;
            }
            s.min(group)
        }
    };
    // the largest power of two at most the cap
    usize::BITS - 1 - cap.max(1).leading_zeros()
}

/// The scratch of a backward call with q of shape `q_shape` and k of shape `k_shape` in
/// `opts`' mode, its group split chosen as for the plain (unmasked, unmodified) kernels
/// of `arch` on `gpu` ([`group_split_shift`]); `None` for a head dim without kernels.
pub fn bwd_scratch_need(
    (q_shape, k_shape): ([usize; 4], [usize; 4]),
    opts: &BwdOptions,
    arch: Arch,
    gpu: GpuFill,
) -> Option<ScratchNeed> {
    let [_, sq, h, d] = q_shape;
    let hk = k_shape[2].max(1);
    let kernel_d = KernelSpec::kernel_head_dim(u32::try_from(d).ok()?)?;
    let main = KernelSpec {
        pass: Pass::Bwd,
        head_dim: kernel_d,
        dtype: flash_codegen::DType::Bf16,
        mask: Mask::None,
        scores: flash_codegen::Scores::Plain,
        tiling: Tiling::Standard,
        arch,
    };
    // (a tiling the call rejects: the rule's, for the size)
    let main = main_spec(main, sq, true, opts, gpu)
        .or_else(|_| {
            main_spec(
                main,
                sq,
                true,
                &BwdOptions {
                    tiling: None,
                    ..*opts
                },
                gpu,
            )
        })
        .ok()?;
    let shift = group_split_shift(&main, k_shape, h / hk, opts, gpu.sms);
    Some(ScratchNeed::of(q_shape, opts.deterministic).with_splits(k_shape, 1 << shift))
}

/// CTAs per SM the automatic group split aims the backward main pass at.
pub const SPLIT_TARGET_CTAS_PER_SM: usize = 8;
