//! Validate layer: what every score pass's plan binds and checks for the score modifiers
//! (the sliding window's bounds, the softcap), the same in the dense, KV-cache and
//! backward plans (the varlen ones take their dense plan's values).

use flash_codegen::Mask;

use super::ParamValue;
use crate::error::{FlashError, Result};
use crate::params::AttnParams;

/// The value of a modifier parameter of `params` by name (`window_left` and
/// `window_right`: -1 as `u32::MAX`, unbounded; `softcap`), `None` for other names. A
/// kernel without the modifier has no such parameter, so the defaults are never bound.
pub(crate) fn modifier_param(params: &AttnParams, name: &str) -> Option<ParamValue> {
    let window = params.window_params().unwrap_or((u32::MAX, u32::MAX));
    match name {
        "window_left" => Some(ParamValue::U32(window.0)),
        "window_right" => Some(ParamValue::U32(window.1)),
        "softcap" => Some(ParamValue::F32(params.softcap.unwrap_or(0.0))),
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
