//! The grouped-query backward's split: how many CTAs share each (key block, kv head)'s
//! query heads in the main pass ([`group_split_shift`]), and the scratch a call needs with
//! it ([`bwd_scratch_need`]).

use flash_codegen::{Arch, KernelSpec, Mask, Pass, Tiling};

use super::ScratchNeed;
use super::split_rule::GpuFill;
use crate::params::BwdOptions;

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
    }
    .for_seqlen(sq, !opts.deterministic)
    .for_smem(gpu.smem_optin);
    let shift = group_split_shift(&main, k_shape, h / hk, opts, gpu.sms);
    Some(ScratchNeed::of(q_shape, opts.deterministic).with_splits(k_shape, 1 << shift))
}

/// CTAs per SM the automatic group split aims the backward main pass at.
pub const SPLIT_TARGET_CTAS_PER_SM: usize = 8;
