//! The KV-cache forward's split rule: which fwdsplit kernel a call runs on and how many
//! splits, from the shapes and the GPU alone (the manifest's kv_cache notes state the
//! same rule for users without Rust).

use flash_codegen::{Arch, DType, KernelSpec, Mask, Pass, Scores, Tiling, Tuning};

use super::MAX_GRID_YZ;
use crate::error::{FlashError, Result};
use crate::params::{AttnParams, MAX_SPLITS};

/// The L2 size the split rule assumes (FlashAttention-3's 50 MiB).
const L2_BYTES: u64 = 50 << 20;

/// What the KV-cache plan needs to know of the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuFill {
    /// Streaming multiprocessors (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`; 0 counts as 1).
    pub sms: u32,
    /// Dynamic shared memory bytes allowed per block (the opt-in limit).
    pub smem_optin: u64,
    /// Shared memory bytes per SM (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR`;
    /// 0: unknown). The backward plans its rows by it
    /// ([`flash_codegen::KernelSpec::for_smem_per_sm`]).
    pub smem_per_sm: u64,
}

impl GpuFill {
    /// A GPU known only by its dynamic shared memory per block (`smem_optin`): SMs and
    /// shared memory per SM unknown (0), so no rule that reads them applies.
    pub const fn per_block(smem_optin: u64) -> Self {
        GpuFill {
            sms: 0,
            smem_optin,
            smem_per_sm: 0,
        }
    }
}

/// The most splits the rule picks (explicit counts go to [`MAX_SPLITS`]): on the H200,
/// batch 1 with one KV head runs fastest at 64 splits from 32K keys on (17.3 us at 32K
/// against 18.5 at 109, 34.0 at 128K against 34.9; docs/performance.md).
const RULE_MAX_SPLITS: u64 = 64;

/// One KV head's K and V bytes below which a grid that fills half the GPU's slots runs
/// unsplit: on the H200 (8 KV heads, batch 8, 132 SMs) 4K keys ran faster in one split
/// than in two (d64, 1 MiB: 27.3 against 29.7 us; d128, 2 MiB: 46.0 against 47.1), 128K
/// in two (d64, 32 MiB: 491 against 578; scripts/sweep_splits.py).
const SPLIT_PAYS_BYTES: u64 = 4 << 20;

/// The split count, after FlashAttention-3's `num_splits_heuristic`, for a KV-cache forward
/// with q `[b, sq, h, d]` and a cache `[b, capacity, hk, d]` on the fwdsplit kernel
/// `split`, with `slots = gpu.sms * ctas_per_sm_hint` CTAs resident at once:
///
/// - `total = m_blocks * hk * b` CTAs per split (`m_blocks = ceil(sq * h / hk / block_m)`).
///   If they nearly fill the GPU (`total >= 0.8 * slots`): 1, unless one KV head's K and V
///   (`capacity * d * 4` bytes) overflow a 50 MiB L2, the queries sweep the keys at least
///   twice (`m_blocks >= 2 * slots`) and the mask is not causal: then
///   `min(ceil(bytes / 50 MiB), 128)` (and at most one split per key block).
/// - With `n_blocks = ceil(capacity / block_n) <= 4` key blocks: 1.
/// - If the CTAs fill 45% of the slots (`total >= 0.45 slots`) and one KV head's K and V are
///   under `SPLIT_PAYS_BYTES` (4 MiB): 1 (the combine costs more than the SMs it brings).
/// - Else, with `max = min(64, slots, n_blocks / 2)` (two key blocks a split at least,
///   and at most 64 splits: measured faster, see `RULE_MAX_SPLITS`): `max` when
///   `total * max <= slots` (not one wave even then: each split more brings an SM more),
///   otherwise the smallest `s <= max` whose wave efficiency `w / ceil(w)` (`w = total * s / slots`) is at least
///   0.95 of the best one's (FlashAttention-3 takes 0.85; measured, 15 splits of 8 CTAs
///   on 132 SMs ran slower than 16).
///
/// The count is then lowered so that `b * s` fits the grid's z limit (65535). The rule
/// sizes for a full cache: it does not see `seqlens_k` (on the device); a caller whose
/// caches are mostly empty can pass fewer splits ([`crate::KvOptions::with_splits`]).
/// 1 for a spec that is not a supported fwdsplit kernel, or an empty problem.
pub fn num_splits_for(
    split: &KernelSpec,
    q_shape: [usize; 4],
    k_shape: [usize; 4],
    gpu: GpuFill,
) -> u32 {
    rule(split, (q_shape, k_shape), gpu, Pages::Contiguous)
}

/// The split count of a paged cache of `page_size`-row pages with the logical shape
/// `k_shape = [b, max_pages * page_size, hk, d]`: [`num_splits_for`]'s, except that with
/// pages smaller than the kernel's key block (each block then costs each thread several
/// table reads, and a CTA more time per block) the rule neither keeps a grid that fills
/// 45% of the slots unsplit nor stops at 64 splits (up to 128). On the H200 with 16-row
/// pages: batch 8 x 8 KV heads x 4K keys (d128) ran 49.3 us in 2 splits against 53.9 in
/// 1, batch 64 x 1 KV head x 4K (d64) 31.9 against 34.0, batch 1 x 1 x 128K (d64) 22.6 in
/// 128 against 23.8 in 64 (the contiguous cache: 46.7, 28.0, 20.8 at its own counts).
pub fn num_splits_for_paged(
    split: &KernelSpec,
    (q_shape, k_shape): ([usize; 4], [usize; 4]),
    gpu: GpuFill,
    page_size: usize,
) -> u32 {
    let small = (page_size as u64) < u64::from(split.tiles().block_n());
    let pages = if small {
        Pages::Small
    } else {
        Pages::Contiguous
    };
    rule(split, (q_shape, k_shape), gpu, pages)
}

/// How the split kernel finds its keys, for [`rule`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pages {
    /// A contiguous cache, or pages of a key block or more.
    Contiguous,
    /// Pages smaller than a key block.
    Small,
}

fn rule(
    split: &KernelSpec,
    (q_shape, k_shape): ([usize; 4], [usize; 4]),
    gpu: GpuFill,
    pages: Pages,
) -> u32 {
    let [b, sq, h, d] = q_shape.map(|x| x as u64);
    let [_, cap, hk, _] = k_shape.map(|x| x as u64);
    if split.pass.tile_pass() != Pass::FwdSplit
        || !split.is_supported()
        || hk == 0
        || b == 0
        || h == 0
        || sq == 0
    {
        return 1;
    }
    let t = split.tiles();
    let slots = slots_of(split, gpu);
    let (m_blocks, total) = split_ctas(split, q_shape, k_shape);
    let n_blocks = cap.div_ceil(u64::from(t.block_n()));
    let kv_head_bytes = cap.saturating_mul(d).saturating_mul(4);
    let s = if total.saturating_mul(5) >= slots * 4 {
        match kv_head_bytes > L2_BYTES && m_blocks >= 2 * slots && !split.mask.is_causal() {
            true => kv_head_bytes.div_ceil(L2_BYTES).min(n_blocks),
            false => 1,
        }
    } else if n_blocks <= 4
        || (pages == Pages::Contiguous
            && total * 20 >= slots * 9
            && kv_head_bytes < SPLIT_PAYS_BYTES)
    {
        1
    } else {
        // at least two key blocks a split, at most 64 splits: one-block splits, and more
        // than 64 (the combine's share), measured slower than the waves they fill (small
        // pages: up to 128)
        let cap = match pages {
            Pages::Contiguous => RULE_MAX_SPLITS,
            Pages::Small => u64::from(MAX_SPLITS),
        };
        let max = cap.min(slots).min(n_blocks / 2);
        let eff = |s: u64| {
            let w = (total * s) as f64 / slots as f64;
            w / w.ceil()
        };
        let best = (1..=max).map(eff).fold(0.0, f64::max);
        match total * max <= slots {
            // not even one wave at the most splits (batch 1, few KV heads): every split
            // more is an SM more reading the cache
            true => max,
            false => (1..=max).find(|&s| eff(s) >= 0.95 * best).unwrap_or(1),
        }
    };
    s.min(u64::from(MAX_SPLITS)).min(MAX_GRID_YZ / b).max(1) as u32
}

/// The fwdsplit kernel of a call with q `[b, sq, h, d]` and caches `[b, capacity, hk, d]`
/// on kernel head dim `kernel_d`: the key-split rows for a decode step's few packed rows,
/// 64-row tiles from 17 on, the prefill row (128-row tiles, d128) from 128 on where its
/// CTAs fill the GPU at the most splits the rule gives ([`prefill_fills`]); the compact
/// row where the GPU's shared memory per block is below the standard row's.
pub(super) fn split_spec(
    q_shape: [usize; 4],
    k_shape: [usize; 4],
    (kernel_d, dtype, params, scores): (u32, DType, &AttnParams, Scores),
    arch: Arch,
    gpu: GpuFill,
) -> Result<KernelSpec> {
    let packed = packed_rows(q_shape, k_shape) as usize;
    let base = KernelSpec {
        pass: Pass::FwdSplit,
        head_dim: kernel_d,
        dtype,
        mask: params.kernel_mask_for(Pass::FwdSplit)?,
        scores,
        tiling: Tiling::Standard,
        arch,
    };
    let spec = base.for_packed_rows(packed);
    let spec = match spec.tiling == Tiling::Prefill && !prefill_fills(&spec, q_shape, k_shape, gpu)
    {
        true => base.with_tiling(Tiling::Long),
        false => spec,
    };
    Ok(spec.for_smem(gpu.smem_optin))
}

/// The cache shape the split rule sizes for: `k_shape`, or, under a sliding window, its
/// capacity cut to the keys the window lets a call's `seqlen_q` queries see (`left +
/// seqlen_q + right`, each bound capped at the capacity), so that a 4K window over a 128K
/// cache splits as a 4K cache does.
pub(super) fn rule_k_shape(
    q_shape: [usize; 4],
    k_shape: [usize; 4],
    params: &AttnParams,
) -> [usize; 4] {
    let [b, cap, hk, d] = k_shape;
    match (params.kernel_mask(), params.window_params()) {
        (Mask::Local, Some((left, right))) => {
            let bound = |x: u32| (x as usize).min(cap);
            let reach = bound(left)
                .saturating_add(q_shape[1])
                .saturating_add(bound(right));
            [b, reach.min(cap), hk, d]
        }
        _ => k_shape,
    }
}

/// Whether the prefill kernel `spec`'s CTAs, at the most splits the rule gives
/// (`min(64, n_blocks / 2)`), reach the GPU's slots. Where they do not (batch 1 with one
/// KV head: 16 to 64 query rows x 8 heads), the long row's twice as many 64-row CTAs ran
/// faster on the H200 (32K keys, 16 rows: 21.1 us against 27.1; 64 rows: 38.3 against
/// 41.2), where they do (batch 8, 16 rows: 64.5 against 73.2; 512 rows x 8 KV heads, 8K
/// keys: 65.5 against 68.2, both with the 4-warp combine) the prefill row.
fn prefill_fills(
    spec: &KernelSpec,
    q_shape: [usize; 4],
    k_shape: [usize; 4],
    gpu: GpuFill,
) -> bool {
    let (_, total) = split_ctas(spec, q_shape, k_shape);
    let n_blocks = (k_shape[1] as u64).div_ceil(u64::from(spec.tiles().block_n()));
    let most = RULE_MAX_SPLITS.min(n_blocks / 2).max(1);
    total.saturating_mul(most) >= slots_of(spec, gpu)
}

/// A sequence's packed query rows, `seqlen_q * (heads / heads_k)` (`heads_k` 0: as 1).
fn packed_rows([_, sq, h, _]: [usize; 4], [_, _, hk, _]: [usize; 4]) -> u64 {
    (sq as u64).saturating_mul((h as u64).checked_div(hk as u64).unwrap_or(1))
}

/// The split kernel `spec`'s packed row blocks per (batch, KV head) and its CTAs per
/// split, `m_blocks * heads_k * batch`.
fn split_ctas(spec: &KernelSpec, q_shape: [usize; 4], k_shape: [usize; 4]) -> (u64, u64) {
    let m_blocks = packed_rows(q_shape, k_shape).div_ceil(u64::from(spec.tiles().block_m()));
    let total = m_blocks
        .saturating_mul(k_shape[2] as u64)
        .saturating_mul(q_shape[0] as u64);
    (m_blocks, total)
}

/// The CTAs of `spec` resident at once on the GPU: SMs x its CTAs per SM.
fn slots_of(spec: &KernelSpec, gpu: GpuFill) -> u64 {
    let ctas = spec.plan(&Tuning::NONE).ctas_per_sm_hint();
    u64::from(gpu.sms.max(1)) * u64::from(ctas)
}

/// The split count a KV-cache forward of q `[b, sq, h, d]` over caches `[b, capacity, hk,
/// d]` (paged: of that logical shape, in `page_size`-row pages) runs with (`num_splits`: [`KvArgs::num_splits`](super::KvArgs::num_splits)), on kernels of `arch` on a GPU
/// described by `gpu`: what [`plan_kvcache`](super::plan_kvcache) plans, from the shapes alone
/// ([`crate::FlashAttention::kvcache_splits`]).
pub fn kvcache_splits(
    q_shape: [usize; 4],
    (k_shape, page_size): ([usize; 4], Option<usize>),
    (dtype, params): (DType, &AttnParams),
    num_splits: Option<u32>,
    arch: Arch,
    gpu: GpuFill,
) -> Result<u32> {
    let d = q_shape[3];
    let kernel_d = KernelSpec::kernel_head_dim(d as u32)
        .filter(|_| d <= 256)
        .ok_or(FlashError::UnsupportedHeadDim { head_dim: d })?;
    let kernel = (kernel_d, dtype, params, params.kernel_scores());
    let spec = split_spec(q_shape, k_shape, kernel, arch, gpu)?;
    let rule_k = rule_k_shape(q_shape, k_shape, params);
    resolve_splits(num_splits, (q_shape, rule_k), (&spec, page_size), gpu)
}

/// The split count of the call: an explicit one checked and lowered to the cache's key
/// blocks, else [`num_splits_for`] (paged, `page_size: Some(..)`: [`num_splits_for_paged`]).
pub(super) fn resolve_splits(
    num_splits: Option<u32>,
    (q_shape, k_shape): ([usize; 4], [usize; 4]),
    (split, page_size): (&KernelSpec, Option<usize>),
    gpu: GpuFill,
) -> Result<u32> {
    match num_splits {
        None => Ok(match page_size {
            None => num_splits_for(split, q_shape, k_shape, gpu),
            Some(p) => num_splits_for_paged(split, (q_shape, k_shape), gpu, p),
        }),
        Some(n) if (1..=MAX_SPLITS).contains(&n) => {
            let n_blocks = k_shape[1].div_ceil(split.tiles().block_n() as usize);
            Ok(n.min(n_blocks.max(1).min(MAX_SPLITS as usize) as u32))
        }
        Some(n) => Err(FlashError::InvalidParam(format!(
            "num_splits must be in 1..={MAX_SPLITS}, got {n} (KvOptions::with_splits); use \
             KvOptions::new() to let the runtime choose"
        ))),
    }
}
