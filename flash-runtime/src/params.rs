//! Runtime API layer: what an attention computes, given once for both of its passes
//! ([`AttnParams`]), how the backward runs ([`BwdOptions`]) and how a KV-cache forward
//! splits its keys ([`KvOptions`]).

use cudarc::driver::CudaSlice;

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
    /// A sliding window as FlashAttention-2 defines it: query `i` sees keys `j` with
    /// `i + a - left <= j <= i + a + right`, `a = seqlen_k - seqlen_q`; `-1` leaves that
    /// side unbounded (`(-1, 0)` is [`Mask::Causal`], `(-1, -1)` [`Mask::None`]; Mistral's
    /// 4096-token window is `(4095, 0)`). Key blocks wholly outside the window cost
    /// nothing. Every call has it: the forwards (dense, varlen, KV cache, paged; in the
    /// varlen and KV-cache calls aligned per sequence) and the backward (dense and varlen,
    /// both modes).
    Window {
        /// Keys before the diagonal each query sees, or -1 for all.
        left: i32,
        /// Keys after the diagonal each query sees, or -1 for all.
        right: i32,
    },
}

/// ALiBi's slopes (Press et al. 2022, FlashAttention-2's `alibi_slopes`): f32 on the
/// device, `[heads]` or `[batch, heads]`, one per query head. The score of query `i` and
/// key `j` gets `-slope * |i + seqlen_k - seqlen_q - j|` added after the scale, before the
/// mask. The borrow keeps the buffer alive for every call that takes the
/// [`AttnParams`] holding it; its length is checked against the call's heads (and batch).
/// The slopes are data, not compiled in: BLOOM's and MPT's differ at head counts that are
/// not a power of two, and fine-tuned models learn their own.
#[derive(Clone, Copy)]
pub struct Alibi<'a> {
    slopes: &'a CudaSlice<f32>,
    per_batch: bool,
}

impl<'a> Alibi<'a> {
    /// One slope per query head: `slopes` holds `heads` f32 values.
    pub const fn per_head(slopes: &'a CudaSlice<f32>) -> Self {
        Alibi {
            slopes,
            per_batch: false,
        }
    }

    /// One slope per batch entry and query head: `slopes` holds `batch * heads` f32
    /// values, row-major `[batch, heads]`.
    pub const fn per_batch_head(slopes: &'a CudaSlice<f32>) -> Self {
        Alibi {
            slopes,
            per_batch: true,
        }
    }

    /// The slopes' buffer.
    pub fn slopes(&self) -> &'a CudaSlice<f32> {
        self.slopes
    }

    /// Whether the slopes are `[batch, heads]` (else `[heads]`).
    pub fn is_per_batch(&self) -> bool {
        self.per_batch
    }
}

impl std::fmt::Debug for Alibi<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alibi")
            .field("len", &self.slopes.len())
            .field("per_batch", &self.per_batch)
            .finish()
    }
}

/// Two `Alibi`s are equal when they borrow the same buffer with the same layout.
impl PartialEq for Alibi<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.slopes, other.slopes) && self.per_batch == other.per_batch
    }
}

/// What an attention computes: `softmax(softcap(q k^T * scale) + alibi + mask) v`. The
/// forward and the backward of one attention take the same value, so their masks and
/// scales cannot disagree. Built with methods (fields may be added):
///
/// ```
/// use flash_runtime::{AttnParams, Mask};
/// let p = AttnParams::causal().with_scale(0.125);
/// assert_eq!((p.mask, p.softmax_scale), (Mask::Causal, Some(0.125)));
/// assert_eq!(AttnParams::new(), AttnParams::default());
/// // Gemma 2: a 4096-token window and a softcap of 50
/// let g = AttnParams::new().with_window(4095, 0).with_softcap(50.0);
/// assert_eq!(g.softcap, Some(50.0));
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnParams<'a> {
    /// The mask; default none.
    pub mask: Mask,
    /// Softmax scale; `None` (default) means `1 / sqrt(head_dim)` of the problem's head dim.
    pub softmax_scale: Option<f32>,
    /// Logit softcap (Gemma 2): each scaled score `x` becomes `cap * tanh(x / cap)` before
    /// the mask and the softmax. `None` (default): none. Finite and positive (checked at
    /// the call). Every call has it: the forwards (dense, varlen, KV cache, paged) and
    /// the backward (dense and varlen, both modes), under every mask.
    pub softcap: Option<f32>,
    /// ALiBi's slopes; `None` (default): none. Every call has it (the forwards: dense,
    /// varlen, KV cache, paged; the backward: dense and varlen, both modes) under no mask
    /// and the causal one (a varlen or KV-cache call's `[batch, heads]` slopes are per
    /// sequence); not with a softcap or a window (no model combines them: a typed error).
    pub alibi: Option<Alibi<'a>>,
}

impl AttnParams<'static> {
    /// No mask, scale `1 / sqrt(head_dim)`.
    pub const fn new() -> Self {
        AttnParams {
            mask: Mask::None,
            softmax_scale: None,
            softcap: None,
            alibi: None,
        }
    }

    /// The causal mask, scale `1 / sqrt(head_dim)`.
    pub const fn causal() -> Self {
        Self::new().with_mask(Mask::Causal)
    }
}

impl<'a> AttnParams<'a> {
    /// The same with mask `mask`.
    pub const fn with_mask(self, mask: Mask) -> Self {
        AttnParams { mask, ..self }
    }

    /// The same with the sliding window `(left, right)` ([`Mask::Window`]; each -1 or
    /// more, checked at the call).
    pub const fn with_window(self, left: i32, right: i32) -> Self {
        self.with_mask(Mask::Window { left, right })
    }

    /// The same with softmax scale `scale` (positive and finite; checked at the call).
    pub const fn with_scale(self, scale: f32) -> Self {
        AttnParams {
            softmax_scale: Some(scale),
            ..self
        }
    }

    /// The same with the logit softcap `cap` ([`AttnParams::softcap`]; finite and
    /// positive, checked at the call).
    pub const fn with_softcap(self, cap: f32) -> Self {
        AttnParams {
            softcap: Some(cap),
            ..self
        }
    }

    /// The same with ALiBi's slopes `alibi` (borrowed for as long as the result lives).
    pub const fn with_alibi<'b>(self, alibi: Alibi<'b>) -> AttnParams<'b> {
        AttnParams {
            mask: self.mask,
            softmax_scale: self.softmax_scale,
            softcap: self.softcap,
            alibi: Some(alibi),
        }
    }

    /// The kernels' score transform: softcap or ALiBi where one is set (the plans take
    /// ALiBi from their resolved slopes, [`crate::validate`]'s `alibi` arguments; both at
    /// once is refused by [`AttnParams::kernel_mask_for`]).
    pub(crate) fn kernel_scores(&self) -> flash_codegen::Scores {
        match (self.softcap, self.alibi) {
            (Some(_), _) => flash_codegen::Scores::Softcap,
            (None, Some(_)) => flash_codegen::Scores::Alibi,
            (None, None) => flash_codegen::Scores::Plain,
        }
    }

    /// Whether the mask is causal (a window `(-1, 0)` is).
    pub fn is_causal(&self) -> bool {
        self.kernel_mask() == flash_codegen::Mask::Causal
    }

    /// The kernels' mask: a window unbounded on both sides is none, `(-1, 0)` causal.
    pub(crate) fn kernel_mask(&self) -> flash_codegen::Mask {
        match self.mask {
            Mask::None
            | Mask::Window {
                left: -1,
                right: -1,
            } => flash_codegen::Mask::None,
            Mask::Causal | Mask::Window { left: -1, right: 0 } => flash_codegen::Mask::Causal,
            Mask::Window { .. } => flash_codegen::Mask::Local,
        }
    }

    /// The window bounds a local kernel takes (`window_left`, `window_right`): -1 becomes
    /// `u32::MAX` (unbounded); `None` unless the mask is a window.
    pub(crate) fn window_params(&self) -> Option<(u32, u32)> {
        let bound = |x: i32| u32::try_from(x).unwrap_or(u32::MAX);
        match self.mask {
            Mask::Window { left, right } => Some((bound(left), bound(right))),
            _ => None,
        }
    }

    /// The kernels' mask for a call of `pass`, checked: a window's bounds must be -1 or
    /// more, a softcap finite and positive, and the pass must have a kernel for the mask
    /// and the softcap.
    pub(crate) fn kernel_mask_for(
        &self,
        pass: flash_codegen::Pass,
    ) -> crate::Result<flash_codegen::Mask> {
        if let Mask::Window { left, right } = self.mask
            && (left < -1 || right < -1)
        {
            return Err(crate::FlashError::InvalidParam(format!(
                "window ({left}, {right}): each bound must be -1 (unbounded) or a key count >= 0"
            )));
        }
        let mask = self.kernel_mask();
        if !pass.has_mask_for(mask) {
            return Err(crate::FlashError::InvalidParam(format!(
                "a sliding window ({:?}): the {} kernels have no sliding-window variant",
                self.mask,
                pass.name()
            )));
        }
        if let Some(cap) = self.softcap {
            if !(cap.is_finite() && cap > 0.0) {
                return Err(crate::FlashError::InvalidParam(format!(
                    "softcap {cap}: the cap must be finite and > 0 (Gemma 2 uses 50.0; leave \
                     it None for no softcap)"
                )));
            }
            if !pass.has_scores_for(flash_codegen::Scores::Softcap, mask) {
                return Err(crate::FlashError::InvalidParam(format!(
                    "a softcap: the {} kernels have no softcap variant",
                    pass.name()
                )));
            }
        }
        if self.alibi.is_some() {
            crate::validate::check_alibi_kernels(self, pass, mask)?;
        }
        Ok(mask)
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
    /// Grouped-query attention: how many CTAs share the query heads of each (key block,
    /// kv head) in the main pass, each summing dK and dV over its own heads of the group
    /// (split `s` takes heads `s, s + n, s + 2n, ...`) into f32 partials that a last kernel
    /// adds in split order (so the deterministic mode stays bitwise reproducible). `None`
    /// (default): chosen from the problem's size and the grid's fill; `Some(1)`: one CTA
    /// walks the whole group. Clamped to `1..=heads / heads_k`; ignored without GQA.
    pub group_splits: Option<u32>,
    /// The main pass's tile row, fixed: for tuning on a GPU whose rule was never measured
    /// (the runtime's choice is by sequence length, shared memory per block and per SM:
    /// [`flash_codegen::KernelSpec::for_seqlen`], `for_smem`, `for_smem_per_sm`). It must be
    /// a row the pass has at the call's head dim, mask and scores, fitting the GPU's shared
    /// memory per block, and `Long` only in atomic mode; else the call returns
    /// [`FlashError::InvalidParam`](crate::FlashError::InvalidParam) naming the rows there
    /// are. `None` (default): the runtime's choice.
    pub tiling: Option<flash_codegen::Tiling>,
}

impl BwdOptions {
    /// Atomic dQ (the default).
    pub const fn new() -> Self {
        BwdOptions {
            deterministic: false,
            group_splits: None,
            tiling: None,
        }
    }

    /// Bitwise reproducible gradients (see [`BwdOptions::deterministic`]).
    pub const fn deterministic() -> Self {
        BwdOptions {
            deterministic: true,
            group_splits: None,
            tiling: None,
        }
    }

    /// These options with the grouped-query split fixed at `n` CTAs per (key block, kv
    /// head) (see [`BwdOptions::group_splits`]; 0 counts as 1).
    pub const fn with_group_splits(mut self, n: u32) -> Self {
        self.group_splits = Some(n);
        self
    }

    /// These options with the main pass fixed on `tiling`'s row (see
    /// [`BwdOptions::tiling`]).
    pub const fn with_tiling(mut self, tiling: flash_codegen::Tiling) -> Self {
        self.tiling = Some(tiling);
        self
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
