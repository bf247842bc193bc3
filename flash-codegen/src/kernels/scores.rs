//! Kernel layer: the score transform between `S = Q K^T` and the mask and softmax
//! ([`Scores`], docs/modifiers.md). A softcap `s = cap * tanh(x / cap)` of the scaled
//! score `x = scale * q . k` is computed as `t = tanh(raw * scale / cap)` on the raw
//! product, the softmax then scaling `t` by `cap` where it would have scaled the raw
//! product by `scale` (FlashAttention-2's arrangement: one multiply and one `tanh` per
//! score, and the max, exponent and log-sum-exp stay the softmax's own).

use super::params::Params;
use crate::abi::SOFTCAP;
use crate::ptx::{Builder, F32, Reg};
use crate::spec::Scores;
use crate::tile::acc::AccTile;

/// log2(e): the softmax's scales are in base 2.
const LOG2_E: f32 = std::f32::consts::LOG2_E;

/// A kernel's score transform (none for [`Scores::Plain`]).
#[derive(Clone, Copy, Debug)]
pub struct ScoreTransform {
    /// What multiplies a raw product before the `tanh`: `scale / cap`.
    pre: Reg<F32>,
}

impl ScoreTransform {
    /// The transform of a kernel computing `scores`, and the scale (times log2 e) its
    /// softmax applies to the transformed scores: `scale_log2` itself for plain scores,
    /// `cap * log2(e)` under a softcap.
    pub fn load(
        b: &mut Builder,
        p: &Params,
        scores: Scores,
        scale_log2: Reg<F32>,
    ) -> (Option<ScoreTransform>, Reg<F32>) {
        match scores {
            Scores::Plain => (None, scale_log2),
            Scores::Softcap => {
                let cap = p.get(SOFTCAP);
                // scale / cap = scale_log2 / (cap * log2 e)
                let cap_log2 = b.mul_f32(cap, LOG2_E);
                let inv = b.rcp(cap_log2);
                let pre = b.mul_f32(scale_log2, inv);
                (Some(ScoreTransform { pre }), cap_log2)
            }
        }
    }

    /// Replaces each raw product of `s` by its transformed score (before the mask: a
    /// masked score must stay -inf, which `tanh` would not keep).
    pub fn apply(&self, b: &mut Builder, s: &mut AccTile) {
        b.comment("-- score transform: softcap, t = tanh(S * scale / cap) --");
        let pre = self.pre;
        s.map(b, |b, _, x| {
            let y = b.mul_f32(x, pre);
            b.tanh(y)
        });
    }
}
