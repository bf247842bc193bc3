//! candle-flash-attn's entry points with their signatures, for a migration that changes
//! only the `use` line (see the crate's MIGRATING.md). Each builds a [`FlashParams`] and
//! calls [`flash_attn`](crate::flash_attn) or [`flash_attn_varlen`](crate::flash_attn_varlen);
//! unlike candle-flash-attn's, they have a backward. A `softcap` of 0.0 is none, as in
//! FlashAttention-2. candle-flash-attn's `flash_attn_varlen_paged_windowed` has no
//! counterpart here (varlen queries over pages): MIGRATING.md shows the
//! [`flash_attn_paged`](crate::flash_attn_paged) call that serves decoding.
#![allow(clippy::too_many_arguments)]

use candle_core::{Result, Tensor};

use crate::{FlashParams, Varlen, flash_attn as run, flash_attn_varlen as run_varlen};

/// The parameters of one candle-flash-attn call: `causal` is the window `(None, Some(0))`.
fn params(
    softmax_scale: f32,
    (left, right): (Option<usize>, Option<usize>),
    alibi_slopes: Option<&Tensor>,
    softcap: f32,
) -> FlashParams {
    let mut p = FlashParams::new()
        .with_scale(softmax_scale)
        .with_window(left, right);
    if softcap != 0.0 {
        p = p.with_softcap(softcap);
    }
    if let Some(slopes) = alibi_slopes {
        p = p.with_alibi(slopes.clone());
    }
    p
}

/// The window of `causal`.
fn causal_window(causal: bool) -> (Option<usize>, Option<usize>) {
    (None, causal.then_some(0))
}

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
        &params(softmax_scale, causal_window(causal), None, 0.0),
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
    let window = (window_size_left, window_size_right);
    run(q, k, v, &params(softmax_scale, window, None, 0.0))
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
    let p = params(
        softmax_scale,
        causal_window(causal),
        Some(alibi_slopes),
        0.0,
    );
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
    let window = (window_size_left, window_size_right);
    run(
        q,
        k,
        v,
        &params(softmax_scale, window, Some(alibi_slopes), 0.0),
    )
}

/// candle-flash-attn's `flash_attn_alibi_windowed_softcap(q, k, v, alibi_slopes,
/// softmax_scale, window_size_left, window_size_right, softcap)`.
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
    let window = (window_size_left, window_size_right);
    run(
        q,
        k,
        v,
        &params(softmax_scale, window, alibi_slopes, softcap),
    )
}

/// candle-flash-attn's `flash_attn_varlen(q, k, v, seqlens_q, seqlens_k, max_seqlen_q,
/// max_seqlen_k, softmax_scale, causal)`: `seqlens_*` are the cumulative offsets (u32
/// `[batch + 1]`).
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let vl = Varlen::new(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k);
    run_varlen(
        q,
        k,
        v,
        &vl,
        &params(softmax_scale, causal_window(causal), None, 0.0),
    )
}

/// candle-flash-attn's `flash_attn_varlen_windowed(q, k, v, seqlens_q, seqlens_k,
/// max_seqlen_q, max_seqlen_k, softmax_scale, window_size_left, window_size_right)`.
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let vl = Varlen::new(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k);
    let window = (window_size_left, window_size_right);
    run_varlen(q, k, v, &vl, &params(softmax_scale, window, None, 0.0))
}

/// candle-flash-attn's `flash_attn_varlen_alibi(q, k, v, alibi_slopes, seqlens_q,
/// seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal)`.
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let vl = Varlen::new(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k);
    let p = params(
        softmax_scale,
        causal_window(causal),
        Some(alibi_slopes),
        0.0,
    );
    run_varlen(q, k, v, &vl, &p)
}

/// candle-flash-attn's `flash_attn_varlen_alibi_windowed(q, k, v, alibi_slopes, seqlens_q,
/// seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, window_size_left,
/// window_size_right)`.
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let vl = Varlen::new(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k);
    let window = (window_size_left, window_size_right);
    run_varlen(
        q,
        k,
        v,
        &vl,
        &params(softmax_scale, window, Some(alibi_slopes), 0.0),
    )
}

/// candle-flash-attn's `flash_attn_varlen_alibi_windowed_softcap(q, k, v, alibi_slopes,
/// seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, window_size_left,
/// window_size_right, softcap)`.
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let vl = Varlen::new(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k);
    let window = (window_size_left, window_size_right);
    run_varlen(
        q,
        k,
        v,
        &vl,
        &params(softmax_scale, window, alibi_slopes, softcap),
    )
}
