//! candle-flash-attn's entry points with their signatures, for a migration that changes
//! only the `use` line (see the crate's MIGRATING.md). Each builds a [`FlashParams`] and
//! calls [`flash_attn`](crate::flash_attn); unlike candle-flash-attn's, they have a
//! backward.

use candle_core::{Result, Tensor};

use crate::{FlashParams, flash_attn as run};

/// candle-flash-attn's `flash_attn(q, k, v, softmax_scale, causal)`.
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    run(
        q,
        k,
        v,
        &FlashParams::new()
            .with_scale(softmax_scale)
            .with_causal(causal),
    )
}

/// candle-flash-attn's `flash_attn_windowed(q, k, v, softmax_scale, window_size_left,
/// window_size_right)`: `None` is unbounded, `right = Some(0)` is causal.
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let p = FlashParams::new()
        .with_scale(softmax_scale)
        .with_window(window_size_left, window_size_right);
    run(q, k, v, &p)
}

/// candle-flash-attn's `flash_attn_alibi(q, k, v, alibi_slopes, softmax_scale, causal)`.
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let p = FlashParams::new()
        .with_scale(softmax_scale)
        .with_causal(causal)
        .with_alibi(alibi_slopes.clone());
    run(q, k, v, &p)
}

/// candle-flash-attn's `flash_attn_alibi_windowed(q, k, v, alibi_slopes, softmax_scale,
/// window_size_left, window_size_right)`.
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let p = FlashParams::new()
        .with_scale(softmax_scale)
        .with_window(window_size_left, window_size_right)
        .with_alibi(alibi_slopes.clone());
    run(q, k, v, &p)
}

/// candle-flash-attn's `flash_attn_alibi_windowed_softcap(q, k, v, alibi_slopes,
/// softmax_scale, window_size_left, window_size_right, softcap)`; a `softcap` of 0.0 is
/// none, as in FlashAttention-2.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let mut p = FlashParams::new()
        .with_scale(softmax_scale)
        .with_window(window_size_left, window_size_right);
    if softcap != 0.0 {
        p = p.with_softcap(softcap);
    }
    if let Some(slopes) = alibi_slopes {
        p = p.with_alibi(slopes.clone());
    }
    run(q, k, v, &p)
}
