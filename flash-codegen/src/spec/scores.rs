//! Spec layer: the score transform a kernel applies between `S = Q K^T` and the softmax
//! (docs/modifiers.md): none, or Gemma 2's logit softcap. Compiled in (a plain kernel
//! pays nothing for it); its value (the cap) is a runtime parameter.

use serde::{Deserialize, Serialize};

use super::{Mask, Pass};

/// What a kernel does to each score before the mask and the softmax.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Scores {
    /// The scaled score `x = softmax_scale * q . k` as it is.
    #[default]
    Plain,
    /// `s = cap * tanh(x / cap)`, the cap a runtime parameter
    /// ([`crate::abi::SOFTCAP`]); the backward multiplies dS by `1 - (s / cap)^2`.
    Softcap,
    /// ALiBi: `s = x - slope * |i + seqlen_k - seqlen_q - j|`, the slopes a device buffer
    /// ([`crate::abi::ALIBI_SLOPES`]); no factor in dS. Without a window (no model uses
    /// both) and without a softcap.
    Alibi,
}

impl Scores {
    /// Every transform, in generation order.
    pub const ALL: [Scores; 3] = [Scores::Plain, Scores::Softcap, Scores::Alibi];

    /// The transform's part of a kernel name (`""`, `"_softcap"`).
    pub fn suffix(self) -> &'static str {
        match self {
            Scores::Plain => "",
            Scores::Softcap => "_softcap",
            Scores::Alibi => "_alibi",
        }
    }

    /// The transform's word in a kernel name (`softcap`), `None` for plain scores.
    pub fn word(self) -> Option<&'static str> {
        self.suffix().strip_prefix('_')
    }
}

impl Pass {
    /// Whether the pass has a kernel computing `scores` under `mask`: plain scores for
    /// every mask it has ([`Pass::has_mask_for`]); softcap in every pass that computes
    /// scores ([`Pass::has_mask`]: the forwards, the backward main pass and its dQ pass),
    /// under every mask.
    pub fn has_scores_for(self, scores: Scores, mask: Mask) -> bool {
        self.has_mask_for(mask)
            && match scores {
                Scores::Plain => true,
                Scores::Softcap => self.has_mask(),
                // (every pass that computes scores; no window: no model uses both)
                Scores::Alibi => self.has_mask() && mask != Mask::Local,
            }
    }
}
