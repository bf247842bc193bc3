//! Runtime API layer: what an attention computes, given once for both of its passes
//! ([`AttnParams`]), how the backward runs ([`BwdOptions`]) and how a KV-cache forward
//! splits its keys ([`KvOptions`]).

/// Which keys each query sees, beyond the sequence end that every call masks.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mask {
    /// Every key.
    #[default]
    None,
    /// Causal, bottom-right aligned when `seqlen_q != seqlen_k` (as FlashAttention >= 2.1):
    /// query `i` sees keys `j <= i + seqlen_k - seqlen_q`.
    Causal,
}

/// What an attention computes: `softmax(q k^T * scale + mask) v`. The forward and the
/// backward of one attention take the same value, so their masks and scales cannot
/// disagree. Built with methods (fields may be added: a sliding window, a softcap, ALiBi):
///
/// ```
/// use flash_runtime::{AttnParams, Mask};
/// let p = AttnParams::causal().with_scale(0.125);
/// assert_eq!((p.mask, p.softmax_scale), (Mask::Causal, Some(0.125)));
/// assert_eq!(AttnParams::new(), AttnParams::default());
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnParams {
    /// The mask; default none.
    pub mask: Mask,
    /// Softmax scale; `None` (default) means `1 / sqrt(head_dim)` of the problem's head dim.
    pub softmax_scale: Option<f32>,
}

impl AttnParams {
    /// No mask, scale `1 / sqrt(head_dim)`.
    pub const fn new() -> Self {
        AttnParams {
            mask: Mask::None,
            softmax_scale: None,
        }
    }

    /// The causal mask, scale `1 / sqrt(head_dim)`.
    pub const fn causal() -> Self {
        Self::new().with_mask(Mask::Causal)
    }

    /// The same with mask `mask`.
    pub const fn with_mask(self, mask: Mask) -> Self {
        AttnParams { mask, ..self }
    }

    /// The same with softmax scale `scale` (positive and finite; checked at the call).
    pub const fn with_scale(self, scale: f32) -> Self {
        AttnParams {
            softmax_scale: Some(scale),
            ..self
        }
    }

    /// Whether the mask is causal.
    pub fn is_causal(&self) -> bool {
        self.mask == Mask::Causal
    }

    /// The kernels' mask.
    pub(crate) fn kernel_mask(&self) -> flash_codegen::Mask {
        match self.mask {
            Mask::None => flash_codegen::Mask::None,
            Mask::Causal => flash_codegen::Mask::Causal,
        }
    }
}

/// How a backward runs (not what it computes: that is its [`AttnParams`]).
///
/// ```
/// use flash_runtime::BwdOptions;
/// assert!(!BwdOptions::default().deterministic);
/// assert!(BwdOptions::deterministic().deterministic);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BwdOptions {
    /// Bitwise reproducible gradients: dQ from its own pass instead of f32 atomics (whose
    /// order of addition varies from run to run). It does about 7/5 of the atomic mode's
    /// matmul FLOPs (S and dP are computed twice) and needs no `dq_accum` scratch, so the
    /// atomic mode is the faster one (docs/performance.md has both modes' numbers).
    /// Default `false` (atomic, like FlashAttention-2).
    pub deterministic: bool,
}

impl BwdOptions {
    /// Atomic dQ (the default).
    pub const fn new() -> Self {
        BwdOptions {
            deterministic: false,
        }
    }

    /// Bitwise reproducible gradients (see [`BwdOptions::deterministic`]).
    pub const fn deterministic() -> Self {
        BwdOptions {
            deterministic: true,
        }
    }
}

/// The most key-range splits a KV-cache forward takes ([`KvOptions::with_splits`]).
pub const MAX_SPLITS: u32 = flash_codegen::abi::decode::MAX_SPLITS;

/// How a KV-cache forward ([`crate::FlashAttention::forward_kvcache`]) runs (not what it
/// computes: that is its [`AttnParams`]).
///
/// ```
/// use flash_runtime::KvOptions;
/// assert_eq!(KvOptions::default().num_splits, None); // the runtime chooses
/// assert_eq!(KvOptions::with_splits(8).num_splits, Some(8));
/// assert_eq!(KvOptions::new(), KvOptions::default());
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvOptions {
    /// Key-range splits per (sequence, KV head): each split's CTA reads `1 / num_splits` of
    /// the cache and a combine kernel merges their partial results. `None` (default): the
    /// runtime picks a count that fills the GPU (`validate::num_splits_for`, FlashAttention-3's
    /// rule). An explicit value must be in `1..=`[`MAX_SPLITS`] (else
    /// [`FlashError::InvalidParam`](crate::FlashError::InvalidParam)); it is lowered to the
    /// number of key blocks of the cache's capacity where it exceeds it (more splits would
    /// only add empty ones). `Some(1)` runs the split kernel alone, with no scratch.
    pub num_splits: Option<u32>,
}

impl KvOptions {
    /// The runtime chooses the split count.
    pub const fn new() -> Self {
        KvOptions { num_splits: None }
    }

    /// Exactly `n` splits (`1..=MAX_SPLITS`, checked at the call; lowered to the cache's
    /// key blocks where it has fewer).
    pub const fn with_splits(n: u32) -> Self {
        KvOptions {
            num_splits: Some(n),
        }
    }
}
