//! Validate layer: what every score pass's plan binds and checks for the score modifiers
//! (the sliding window's bounds, the softcap, ALiBi's slopes), the same in the dense, KV-cache and
//! backward plans (the varlen ones take their dense plan's values).

use flash_codegen::{Mask, Pass, Scores};

use super::{BufDesc, ParamValue, shape_err};
use crate::error::{FlashError, Result};
use crate::params::AttnParams;

/// The value of a modifier parameter by name (`window_left` and `window_right` of
/// `params`: -1 as `u32::MAX`, unbounded; `softcap`; `alibi_slopes` and
/// `alibi_batch_stride` of the call's resolved `slopes`, [`call_scores`]), `None` for
/// other names. A kernel without the modifier has no such parameter, so the defaults are
/// never bound.
pub(crate) fn modifier_param(
    params: &AttnParams,
    slopes: Option<(u64, u32)>,
    name: &str,
) -> Option<ParamValue> {
    let window = params.window_params().unwrap_or((u32::MAX, u32::MAX));
    match name {
        "window_left" => Some(ParamValue::U32(window.0)),
        "window_right" => Some(ParamValue::U32(window.1)),
        "softcap" => Some(ParamValue::F32(params.softcap.unwrap_or(0.0))),
        "alibi_slopes" => slopes.map(|(ptr, _)| ParamValue::U64(ptr)),
        "alibi_batch_stride" => slopes.map(|(_, stride)| ParamValue::U32(stride)),
        _ => None,
    }
}

/// Under a sliding window the kernels add both lengths and a block's rows in one i32
/// sum: `seqlen_q + keys` (`keys_name` says which: `seqlen_k`, the cache's capacity) must
/// stay below `2^31 - 256`.
pub(crate) fn check_window_lengths(
    mask: Mask,
    (seqlen_q, keys): (usize, usize),
    keys_name: &str,
) -> Result<()> {
    if mask == Mask::Local && seqlen_q + keys + 256 >= 1 << 31 {
        return Err(FlashError::InvalidParam(format!(
            "a sliding window needs seqlen_q + {keys_name} below 2^31 - 256, got {seqlen_q} \
             + {keys}"
        )));
    }
    Ok(())
}

/// ALiBi's slopes as the checks see them: f32 `[heads]` or (`per_batch`) `[batch, heads]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlibiDesc {
    /// The slopes' buffer.
    pub slopes: BufDesc,
    /// `[batch, heads]` rather than `[heads]`.
    pub per_batch: bool,
}

/// Refuses ALiBi, with a typed error, where no kernel has it: with a softcap, under a
/// sliding window, or in a pass without ALiBi kernels.
pub(crate) fn check_alibi_kernels(params: &AttnParams, pass: Pass, mask: Mask) -> Result<()> {
    if params.softcap.is_some() {
        return Err(FlashError::InvalidParam(
            "ALiBi and a softcap together: no kernel computes both (no model uses both); \
             set one of them"
                .into(),
        ));
    }
    if mask == Mask::Local {
        return Err(FlashError::InvalidParam(format!(
            "ALiBi under a sliding window ({:?}): no kernel computes both; use no mask or \
             the causal one with ALiBi",
            params.mask
        )));
    }
    if !pass.has_scores_for(Scores::Alibi, mask) {
        return Err(FlashError::InvalidParam(format!(
            "ALiBi: the {} kernels have no ALiBi variant yet (the dense and varlen forward and \
             backward have one)",
            pass.name()
        )));
    }
    Ok(())
}

/// The scores of a call of `pass` under `mask` whose ALiBi slopes (if any) resolved to
/// `alibi`, and the slopes' kernel parameters (pointer, batch stride) checked against
/// `batch` x `heads`: exactly `heads` values (`[heads]`) or `batch * heads`, 4-byte aligned.
pub(crate) fn call_scores(
    params: &AttnParams,
    alibi: Option<&AlibiDesc>,
    (pass, mask): (Pass, Mask),
    (batch, heads): (usize, usize),
) -> Result<(Scores, Option<(u64, u32)>)> {
    let Some(a) = alibi else {
        if params.alibi.is_some() {
            return Err(FlashError::Internal(
                "ALiBi slopes given but not resolved to a buffer".into(),
            ));
        }
        return Ok((params.kernel_scores(), None));
    };
    check_alibi_kernels(params, pass, mask)?;
    let (need, dims, stride) = match a.per_batch {
        true => (batch * heads, "[batch, heads]", heads),
        false => (heads, "[heads]", 0),
    };
    if a.slopes.len != need {
        return Err(shape_err(format!(
            "ALiBi slopes {dims} must hold {need} f32 values (batch {batch}, heads {heads}) but \
             the buffer holds {}",
            a.slopes.len
        )));
    }
    if a.slopes.ptr % 4 != 0 || a.slopes.ptr == 0 {
        return Err(FlashError::Misaligned {
            tensor: "alibi_slopes",
            why: format!(
                "its pointer {:#x} is null or not 4-byte aligned",
                a.slopes.ptr
            ),
        });
    }
    Ok((Scores::Alibi, Some((a.slopes.ptr, stride as u32))))
}
