//! The sm_90a forward's rule on the modifiers: the mask and scale, the score transform (a
//! softcap, ALiBi's slopes) and their launch values, or the modifier the kernel lacks.

use flash_codegen::{Mask, Scores};

use super::{AlibiDesc, FwdArgs, Sm90ScoreArgs};
use crate::params::AttnParams;

/// The kernels' mask (a window's bounds -1 or more), `scale_log2`, score transform and its
/// launch values, or the modifier the kernel lacks. Takes every field of [`AttnParams`] by
/// name, so a new one fails to compile here until the rule says whether the kernel has it.
pub(super) fn modifiers(
    a: &FwdArgs,
    (b, h, d): (usize, usize, usize),
) -> Result<Modifiers, String> {
    let AttnParams {
        mask,
        softmax_scale,
        softcap,
        alibi,
    } = a.params;
    if let crate::Mask::Window { left, right } = mask
        && (left < -1 || right < -1)
    {
        return Err(format!(
            "window ({left}, {right}): each bound must be -1 (unbounded) or a key count >= 0"
        ));
    }
    let scale = match softmax_scale {
        None => 1.0 / (d as f64).sqrt(),
        Some(s) if s.is_finite() && s > 0.0 => f64::from(s),
        Some(s) => {
            return Err(format!(
                "softmax scale {s}: the sm_90a forward takes a positive, finite scale"
            ));
        }
    };
    let kernel_mask = a.params.kernel_mask();
    let (scores, args) = match (softcap, a.alibi) {
        (Some(_), Some(_)) => {
            return Err("ALiBi and a softcap together: no sm_90a kernel computes both".into());
        }
        (Some(cap), None) if cap.is_finite() && cap > 0.0 => (
            Scores::Softcap,
            Sm90ScoreArgs {
                softcap: cap,
                ..Default::default()
            },
        ),
        (Some(cap), None) => {
            return Err(format!(
                "softcap {cap}: the sm_90a forward takes a positive, finite cap"
            ));
        }
        (None, Some(_)) if kernel_mask == Mask::Local => {
            return Err(format!(
                "ALiBi under a sliding window ({mask:?}): the sm_90a forward has ALiBi without \
                 a mask and causal only"
            ));
        }
        (None, Some(s)) => (Scores::Alibi, slopes(&s, b, h)?),
        (None, None) if alibi.is_some() => {
            return Err("ALiBi slopes given but not resolved to a buffer".into());
        }
        (None, None) => (Scores::Plain, Sm90ScoreArgs::default()),
    };
    Ok(Modifiers {
        mask: kernel_mask,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
        scores,
        args,
    })
}

/// What [`modifiers`] gives a call: the kernel's mask and score transform, their values.
pub(super) struct Modifiers {
    pub(super) mask: Mask,
    pub(super) scale_log2: f32,
    pub(super) scores: Scores,
    pub(super) args: Sm90ScoreArgs,
}

/// ALiBi's slopes as the kernel reads them (`[heads]`, or `[batch, heads]` with a batch
/// stride of `heads`), or why it cannot.
fn slopes(s: &AlibiDesc, b: usize, h: usize) -> Result<Sm90ScoreArgs, String> {
    let (need, dims) = match s.per_batch {
        true => (b.saturating_mul(h), "[batch, heads]"),
        false => (h, "[heads]"),
    };
    if s.slopes.len != need {
        return Err(format!(
            "ALiBi slopes {dims} must hold {need} f32 values (batch {b}, heads {h}), the \
             buffer holds {}",
            s.slopes.len
        ));
    }
    if s.slopes.ptr == 0 || !s.slopes.ptr.is_multiple_of(4) {
        return Err(format!(
            "ALiBi slopes at {:#x}: the sm_90a forward reads them from a 4-byte aligned \
             pointer",
            s.slopes.ptr
        ));
    }
    let stride = if s.per_batch { h } else { 0 };
    let Ok(slopes_batch_stride) = u32::try_from(stride) else {
        return Err(format!("heads {h}: ALiBi's batch stride must fit u32"));
    };
    Ok(Sm90ScoreArgs {
        slopes: s.slopes.ptr,
        slopes_batch_stride,
        ..Default::default()
    })
}
