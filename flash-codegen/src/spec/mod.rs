//! Spec layer: `KernelSpec`, the one key naming every kernel variant, and its tile table.
//!
//! A spec round-trips through its name (`fa2_fwd_d128_bf16_causal_sm80`), which is also
//! the PTX entry name, the file stem the CLI writes and the key of the runtime's cache.

use serde::{Deserialize, Serialize};

mod name;
mod plan;
mod scores;
mod smem;
mod tiles;
mod tiling;

pub use plan::KernelPlan;
pub use scores::Scores;
pub use smem::{SmemLayout, StreamRegion, TileRegion};
pub use tiles::{Sm80Layout, Sm80Tiles, TileConfig, Tuning, check, parse_override};
pub use tiling::{TUNED_SMEM_PER_SM, Tiling};

/// Which FlashAttention-2 pass a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    /// O = softmax(Q K^T * scale) V, plus the row log-sum-exp.
    Fwd,
    /// Backward preprocess: D = rowsum(dO * O) (f32) and the dQ accumulator zeroed.
    BwdPre,
    /// Backward main pass, parallel over key blocks: dK, dV, and dQ accumulated in f32
    /// with atomics (or left to [`Pass::BwdDq`] in deterministic mode).
    Bwd,
    /// Deterministic dQ, parallel over query blocks (recomputes S and dP; no atomics).
    BwdDq,
    /// Backward postprocess: dQ = dq_accum * softmax_scale, converted to the element type.
    BwdPost,
    /// The grouped-query backward's last step when [`Pass::Bwd`] splits a group's query
    /// heads over several CTAs: dK and dV = the sum of their f32 partials, in split order.
    BwdKvSum,
    /// Split-KV forward against a KV cache (decode, speculative verification, chunked
    /// prefill): the query heads of a KV group packed into one tile's rows, per-sequence
    /// key counts (`seqlens_k`), the key range split across `num_splits` CTAs, each writing
    /// a partial O (f32) and LSE that [`Pass::FwdCombine`] merges; with one split it writes
    /// O and the LSE itself.
    FwdSplit,
    /// The split-KV forward's combine step: O and LSE from the splits' partial results.
    FwdCombine,
    /// [`Pass::FwdSplit`] over a paged KV cache: K and V pools of pages
    /// `[num_pages, page_size, heads_k, head_dim]` and a `block_table` (i32
    /// `[batch, max_pages]`) mapping each sequence's logical pages to physical ones. Same
    /// tiles, grid, partial buffers and combine step.
    FwdPaged,
    /// [`Pass::Fwd`] over packed variable-length sequences: q `[total_q, heads, d]`, k and
    /// v `[total_k, heads_k, d]`, sequence `b` in rows `cu_seqlens_q[b]..cu_seqlens_q[b +
    /// 1]` (and likewise for k, v); each sequence its own problem (causal bottom-right per
    /// sequence), lse `[heads, total_q]`. Same tiles as [`Pass::Fwd`].
    FwdVarlen,
    /// [`Pass::BwdPre`] over packed sequences (D `[heads, total_q]`).
    BwdPreVarlen,
    /// [`Pass::Bwd`] over packed sequences.
    BwdVarlen,
    /// [`Pass::BwdDq`] over packed sequences.
    BwdDqVarlen,
    /// [`Pass::BwdPost`] over packed sequences.
    BwdPostVarlen,
}

impl Pass {
    /// Every pass, in generation order.
    pub const ALL: [Pass; 14] = [
        Pass::Fwd,
        Pass::BwdPre,
        Pass::Bwd,
        Pass::BwdDq,
        Pass::BwdPost,
        Pass::BwdKvSum,
        Pass::FwdSplit,
        Pass::FwdCombine,
        Pass::FwdPaged,
        Pass::FwdVarlen,
        Pass::BwdPreVarlen,
        Pass::BwdVarlen,
        Pass::BwdDqVarlen,
        Pass::BwdPostVarlen,
    ];
    /// The pass's part of a kernel name (`fwd`, `bwdpre`, `bwd`, `bwddq`, `bwdpost`,
    /// `bwdkvsum`, `fwdsplit`, `fwdcombine`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Pass::Fwd => "fwd",
            Pass::BwdPre => "bwdpre",
            Pass::Bwd => "bwd",
            Pass::BwdDq => "bwddq",
            Pass::BwdPost => "bwdpost",
            Pass::BwdKvSum => "bwdkvsum",
            Pass::FwdSplit => "fwdsplit",
            Pass::FwdCombine => "fwdcombine",
            Pass::FwdPaged => "fwdpaged",
            Pass::FwdVarlen => "fwdvarlen",
            Pass::BwdPreVarlen => "bwdprevarlen",
            Pass::BwdVarlen => "bwdvarlen",
            Pass::BwdDqVarlen => "bwddqvarlen",
            Pass::BwdPostVarlen => "bwdpostvarlen",
        }
    }

    /// The pass whose tile rows, shared-memory plan and kernel body this one uses:
    /// [`Pass::FwdSplit`] for [`Pass::FwdPaged`] (only the K/V addressing differs), the
    /// dense pass of a varlen one (only the row addressing differs), else itself.
    pub fn tile_pass(self) -> Pass {
        match self {
            Pass::FwdPaged => Pass::FwdSplit,
            Pass::FwdVarlen => Pass::Fwd,
            Pass::BwdPreVarlen => Pass::BwdPre,
            Pass::BwdVarlen => Pass::Bwd,
            Pass::BwdDqVarlen => Pass::BwdDq,
            Pass::BwdPostVarlen => Pass::BwdPost,
            p => p,
        }
    }

    /// Whether the pass runs over packed variable-length sequences (`cu_seqlens`).
    pub fn is_varlen(self) -> bool {
        matches!(
            self,
            Pass::FwdVarlen
                | Pass::BwdPreVarlen
                | Pass::BwdVarlen
                | Pass::BwdDqVarlen
                | Pass::BwdPostVarlen
        )
    }

    /// The varlen pass over the same kernel body (`None` for passes without one).
    pub fn varlen(self) -> Option<Pass> {
        Pass::ALL
            .into_iter()
            .find(|p| p.is_varlen() && p.tile_pass() == self)
    }
    /// Whether the pass has causal and non-causal variants (elementwise passes do not).
    pub fn has_mask(self) -> bool {
        matches!(
            self.tile_pass(),
            Pass::Fwd | Pass::Bwd | Pass::BwdDq | Pass::FwdSplit
        )
    }
    /// Whether the pass has a variant for `mask`: every pass for none, the score passes
    /// ([`Pass::has_mask`]: the forwards, the backward main pass and its dQ pass) for
    /// causal and for the sliding window.
    pub fn has_mask_for(self, mask: Mask) -> bool {
        match mask {
            Mask::None => true,
            Mask::Causal | Mask::Local => self.has_mask(),
        }
    }
}

/// Element type of q, k, v, o (and of the gradients).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl DType {
    /// Both element types.
    pub const ALL: [DType; 2] = [DType::F16, DType::Bf16];
    /// The dtype's part of a kernel name (`f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }
    /// Bytes per element.
    pub fn size(self) -> u32 {
        2
    }
}

/// Which keys each query sees (beyond the sequence end, which every kernel masks).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Mask {
    /// Every key.
    #[default]
    None,
    /// Bottom-right aligned causal: query i sees keys j <= i + seqlen_k - seqlen_q.
    Causal,
    /// A sliding window, its bounds runtime parameters (`window_left`, `window_right`,
    /// [`crate::abi::WINDOW_LEFT`]): query i sees keys j with `i + a - left <= j <= i + a +
    /// right`, `a = seqlen_k - seqlen_q` (a bound at least the sequence's length is
    /// unbounded). Key blocks wholly outside the window are not visited.
    Local,
}

impl Mask {
    /// Every mask, in generation order.
    pub const ALL: [Mask; 3] = [Mask::None, Mask::Causal, Mask::Local];
    /// The mask's part of a kernel name (`""`, `"_causal"`, `"_local"`).
    pub fn suffix(self) -> &'static str {
        match self {
            Mask::None => "",
            Mask::Causal => "_causal",
            Mask::Local => "_local",
        }
    }
    /// The mask's word in a kernel name (`causal`, `local`), `None` for no mask.
    pub fn word(self) -> Option<&'static str> {
        self.suffix().strip_prefix('_')
    }
    /// The causal mask, or none.
    pub fn causal(causal: bool) -> Mask {
        if causal { Mask::Causal } else { Mask::None }
    }
    /// Whether this is the causal mask.
    pub fn is_causal(self) -> bool {
        self == Mask::Causal
    }
}

/// The GPU architecture family a kernel is generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// mma.sync path: runs on every GPU from sm_80 (A100, RTX 30/40, H100/H200).
    Sm80,
}

impl Arch {
    /// Every architecture path.
    pub const ALL: [Arch; 1] = [Arch::Sm80];
    /// The arch's part of a kernel name (`sm80`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm80",
        }
    }
    /// The lowest compute capability (major, minor) that runs this arch's kernels.
    pub fn min_compute_capability(self) -> (u32, u32) {
        match self {
            Arch::Sm80 => (8, 0),
        }
    }
}

/// The head dimensions with a kernel of their own; any other multiple of 8 up to 256 runs
/// on the next one up with zero-filled loads.
pub const HEAD_DIMS: [u32; 8] = [32, 64, 96, 128, 160, 192, 224, 256];

/// The key of one generated kernel. Its [`name`](KernelSpec::name) is also the PTX entry
/// name and parses back ([`FromStr`](std::str::FromStr)):
///
/// ```
/// use flash_codegen::{Arch, DType, KernelSpec, Mask, Pass, Scores, Tiling};
///
/// let spec = KernelSpec {
///     pass: Pass::Fwd,
///     head_dim: 128,
///     dtype: DType::Bf16,
///     mask: Mask::Causal,
///     scores: Scores::Plain,
///     tiling: Tiling::Standard,
///     arch: Arch::Sm80,
/// };
/// assert_eq!(spec.name(), "fa2_fwd_d128_bf16_causal_sm80");
/// assert_eq!("fa2_fwd_d128_bf16_causal_sm80".parse::<KernelSpec>(), Ok(spec));
/// assert_eq!(spec.tiles().block_m(), 128);
/// let ptx = flash_codegen::generate(&spec);
/// assert!(ptx.contains(".entry fa2_fwd_d128_bf16_causal_sm80"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelSpec {
    /// Which pass the kernel computes.
    pub pass: Pass,
    /// The kernel's head dim, one of [`HEAD_DIMS`]; problems with a smaller multiple of 8
    /// run on it with zero-filled columns.
    pub head_dim: u32,
    /// Element type of q, k, v, o and the gradients.
    pub dtype: DType,
    /// The mask; only passes with [`Pass::has_mask`] have masked variants.
    pub mask: Mask,
    /// The score transform ([`Scores::Plain`] unless the pass has others,
    /// [`Pass::has_scores_for`]; the name says `_softcap` after the mask).
    #[serde(default)]
    pub scores: Scores,
    /// The tile row: [`Tiling::Standard`], [`Tiling::Long`] where the pass has a row for
    /// long sequences, or [`Tiling::Compact`] where it has one for GPUs with less shared
    /// memory (the name ends in `_long` or `_compact` before the arch).
    #[serde(default)]
    pub tiling: Tiling,
    /// The architecture path the PTX is written for.
    pub arch: Arch,
}

pub use name::ParseSpecError;

impl KernelSpec {
    /// Every supported variant, in a stable order.
    pub fn all() -> Vec<KernelSpec> {
        let mut v = Vec::new();
        for arch in Arch::ALL {
            for pass in Pass::ALL {
                for head_dim in HEAD_DIMS {
                    for dtype in DType::ALL {
                        for (mask, scores) in Mask::ALL
                            .into_iter()
                            .flat_map(|m| Scores::ALL.map(|s| (m, s)))
                        {
                            if !pass.has_scores_for(scores, mask) {
                                continue;
                            }
                            let spec = KernelSpec {
                                pass,
                                head_dim,
                                dtype,
                                mask,
                                scores,
                                tiling: Tiling::Standard,
                                arch,
                            };
                            v.extend(spec.tilings());
                        }
                    }
                }
            }
        }
        v
    }

    /// The spec of the kernel that runs a problem of head dimension `d`: the next kernel
    /// head dim up. `None` when `d` is 0, not a multiple of 8, or above 256.
    pub fn kernel_head_dim(d: u32) -> Option<u32> {
        if d == 0 || d % 8 != 0 {
            return None;
        }
        HEAD_DIMS.iter().copied().find(|&k| k >= d)
    }

    /// Whether this spec names a generated kernel: a head dim of [`HEAD_DIMS`], a mask
    /// only for passes with one, [`Tiling::Long`] and [`Tiling::Compact`] only where
    /// the pass has such a row.
    pub fn is_supported(&self) -> bool {
        HEAD_DIMS.contains(&self.head_dim)
            && self.pass.has_scores_for(self.scores, self.mask)
            && (self.tiling == Tiling::Standard || self.has_tiling_row())
    }

    /// The head dim rounded up to whole 64-column shared-memory panels.
    pub fn smem_head_dim(&self) -> u32 {
        self.head_dim.div_ceil(64) * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared-memory budgets the README promises: every kernel (forward, split-KV,
    /// backward, dense and varlen) runs on RTX 30/40 (99 KiB per block), on its compact
    /// row where its standard, long or wide one needs more; every kernel fits an
    /// H100/H200 (227 KiB per block).
    #[test]
    fn shared_memory_budgets() {
        const RTX: u64 = 99 * 1024;
        for s in KernelSpec::all() {
            assert!(
                s.smem_bytes() <= 227 * 1024,
                "{s}: {} bytes",
                s.smem_bytes()
            );
            if s.tiling != Tiling::Compact {
                let fit = s.for_smem(RTX);
                assert!(
                    u64::from(fit.smem_bytes()) <= RTX,
                    "{fit}: {} bytes",
                    fit.smem_bytes()
                );
                assert_eq!(s.for_smem(227 * 1024), s, "{s}");
            }
        }
    }

    #[test]
    fn kernel_head_dim_rounds_up() {
        assert_eq!(KernelSpec::kernel_head_dim(8), Some(32));
        assert_eq!(KernelSpec::kernel_head_dim(72), Some(96));
        assert_eq!(KernelSpec::kernel_head_dim(256), Some(256));
        assert_eq!(KernelSpec::kernel_head_dim(264), None);
        assert_eq!(KernelSpec::kernel_head_dim(60), None);
    }
}
