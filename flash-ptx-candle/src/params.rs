//! The op's parameters, in candle-flash-attn's conventions, and their translation into
//! flash-runtime's [`AttnParams`] (device-free, so the CPU tests check every rule).

use candle_core::{Error, Result, Tensor};
use flash_runtime::{AttnParams, Mask};

/// What one attention call computes; one value serves the forward and its backward.
///
/// The fields follow candle-flash-attn's arguments: `softmax_scale` (here optional:
/// `None` is `1 / sqrt(head_dim)`), `causal`, `window_size_left` / `window_size_right`
/// (`None` = unbounded; a query at row `i` sees key `j` when `i + sk - sq - left <= j <=
/// i + sk - sq + right`, FlashAttention-2's bottom-right alignment), `softcap` (Gemma 2:
/// `cap * tanh(s / cap)` before the softmax) and `alibi_slopes` (f32 `[h]` or `[b, h]` on
/// the tensors' device; bias `-slope * |i + sk - sq - j|`). `causal` is the window
/// `(left, Some(0))`, as in candle-flash-attn. `deterministic` makes the backward
/// bitwise reproducible (about 7/5 of its matmul work; the forward is always).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct FlashParams {
    /// Multiplies q k^T before the softmax; `None`: `1 / sqrt(head_dim)`.
    pub softmax_scale: Option<f32>,
    /// Each query sees the keys up to its (bottom-right aligned) diagonal.
    pub causal: bool,
    /// Keys before the diagonal a query sees; `None`: all of them.
    pub window_size_left: Option<usize>,
    /// Keys after the diagonal a query sees; `None`: all of them (0 under `causal`).
    pub window_size_right: Option<usize>,
    /// Logit softcap (`> 0`, finite); `None`: none.
    pub softcap: Option<f32>,
    /// ALiBi slopes, f32 `[heads]` or `[batch, heads]`.
    pub alibi_slopes: Option<Tensor>,
    /// A bitwise reproducible backward.
    pub deterministic: bool,
    /// KV-cache and paged calls only: key-range splits per (sequence, KV head), `1..=`
    /// [`flash_runtime::MAX_SPLITS`]; `None`: the runtime picks a count that fills the GPU.
    pub num_splits: Option<u32>,
}

impl FlashParams {
    /// No mask, the default scale.
    pub fn new() -> Self {
        Self::default()
    }

    /// The causal mask (bottom-right aligned when `seqlen_q != seqlen_k`).
    pub fn causal() -> Self {
        Self::new().with_causal(true)
    }

    /// Sets the causal mask.
    pub fn with_causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Sets the softmax scale.
    pub fn with_scale(mut self, scale: f32) -> Self {
        self.softmax_scale = Some(scale);
        self
    }

    /// A sliding window: `left` keys before the diagonal, `right` after (`None`:
    /// unbounded). Mistral's window of `w` keys is `(Some(w - 1), Some(0))`.
    pub fn with_window(mut self, left: Option<usize>, right: Option<usize>) -> Self {
        self.window_size_left = left;
        self.window_size_right = right;
        self
    }

    /// A logit softcap (Gemma 2 uses 50.0 for attention).
    pub fn with_softcap(mut self, cap: f32) -> Self {
        self.softcap = Some(cap);
        self
    }

    /// ALiBi slopes, f32 `[heads]` or `[batch, heads]`.
    pub fn with_alibi(mut self, slopes: Tensor) -> Self {
        self.alibi_slopes = Some(slopes);
        self
    }

    /// A bitwise reproducible backward.
    pub fn with_deterministic(mut self, deterministic: bool) -> Self {
        self.deterministic = deterministic;
        self
    }

    /// KV-cache and paged calls: exactly `n` key-range splits (`1..=MAX_SPLITS`).
    pub fn with_num_splits(mut self, n: u32) -> Self {
        self.num_splits = Some(n);
        self
    }

    /// The key range each query sees, as `(left, right)` with `-1` unbounded
    /// (FlashAttention-2's window; `causal` forces `right = 0`).
    pub fn window(&self) -> Result<(i32, i32)> {
        let bound = |what: &str, x: Option<usize>| -> Result<i32> {
            match x {
                None => Ok(-1),
                Some(x) => i32::try_from(x).map_err(|_| {
                    Error::Msg(format!(
                        "flash-ptx: {what} {x} is out of range (at most {}; None for an \
                         unbounded side)",
                        i32::MAX
                    ))
                }),
            }
        };
        let left = bound("window_size_left", self.window_size_left)?;
        let right = match self.causal {
            true => 0,
            false => bound("window_size_right", self.window_size_right)?,
        };
        Ok((left, right))
    }

    /// The runtime's mask for these parameters (ALiBi is bound by the caller, which holds
    /// the slopes' device buffer).
    pub fn attn_params(&self) -> Result<AttnParams<'static>> {
        let mask = match self.window()? {
            (-1, -1) => Mask::None,
            (-1, 0) => Mask::Causal,
            (left, right) => Mask::Window { left, right },
        };
        let mut p = AttnParams::new().with_mask(mask);
        if let Some(scale) = self.softmax_scale {
            if !scale.is_finite() {
                return Err(Error::Msg(format!(
                    "flash-ptx: softmax_scale {scale} is not finite (None for 1/sqrt(head_dim))"
                )));
            }
            p = p.with_scale(scale);
        }
        if let Some(cap) = self.softcap {
            if !(cap.is_finite() && cap > 0.0) {
                return Err(Error::Msg(format!(
                    "flash-ptx: softcap {cap}: the cap must be finite and > 0 (Gemma 2 uses \
                     50.0; None for no softcap)"
                )));
            }
            if self.alibi_slopes.is_some() {
                return Err(Error::Msg(
                    "flash-ptx: softcap and ALiBi together: no model uses both and no kernel \
                     computes them; pick one"
                        .into(),
                ));
            }
            p = p.with_softcap(cap);
        }
        Ok(p)
    }

    /// The scale the op applies: the given one or `1 / sqrt(head_dim)`.
    pub fn scale_for(&self, head_dim: usize) -> f32 {
        self.softmax_scale
            .unwrap_or_else(|| 1.0 / (head_dim as f32).sqrt())
    }
}
