//! Kernel layer: the score transform between `S = Q K^T` and the mask and softmax
//! ([`Scores`], docs/modifiers.md). A softcap `s = cap * tanh(x / cap)` of the scaled
//! score `x = scale * q . k` is computed as `t = tanh(raw * scale / cap)` on the raw
//! product, the softmax then scaling `t` by `cap` where it would have scaled the raw
//! product by `scale` (FlashAttention-2's arrangement: one multiply and one `tanh` per
//! score, and the max, exponent and log-sum-exp stay the softmax's own).
//!
//! The backward needs `ds / dx = 1 - t^2` where dS meets P: [`ScoreGrad`] recovers `t`
//! from P itself, `t = (log2 P + LSE log2 e) / (cap log2 e)` (P = `exp2(t cap log2 e - LSE
//! log2 e)`), clamped to `[-1, 1]`, so no second tile of registers holds `t`.

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

/// What a kernel applies to its raw products: the transform, the softmax's scale after
/// it, and (backward) the transform's derivative. Plain scores: none, `scale_log2`, none.
#[derive(Clone, Copy, Debug)]
pub struct ScoreRule {
    /// The transform before the mask ([`ScoreTransform::apply`]).
    pub transform: Option<ScoreTransform>,
    /// The scale (times log2 e) the softmax applies to the transformed scores.
    pub softmax_scale: Reg<F32>,
    /// The transform's derivative, where dS is formed.
    pub grad: Option<ScoreGrad>,
}

impl ScoreRule {
    /// The rule of a kernel computing `scores` with softmax scale `scale_log2` (a few
    /// instructions: the backward loads it where a block needs it, not through its loops).
    pub fn load(b: &mut Builder, p: &Params, scores: Scores, scale_log2: Reg<F32>) -> Self {
        let (transform, softmax_scale) = ScoreTransform::load(b, p, scores, scale_log2);
        let grad = transform.map(|_| ScoreGrad {
            inv_cap_log2: b.rcp(softmax_scale),
        });
        ScoreRule {
            transform,
            softmax_scale,
            grad,
        }
    }

    /// [`ScoreTransform::apply`] where there is a transform.
    pub fn apply(&self, b: &mut Builder, s: &mut AccTile) {
        if let Some(t) = &self.transform {
            t.apply(b, s);
        }
    }
}

/// The softcap's derivative `1 - t^2`, `t` recovered from P (module docs).
#[derive(Clone, Copy, Debug)]
pub struct ScoreGrad {
    /// `1 / (cap log2 e)`.
    inv_cap_log2: Reg<F32>,
}

impl ScoreGrad {
    /// `1 - t^2` of probability `p` in a row (or column) of `LSE * log2 e` `lse_log2`:
    /// `t = (log2 p + lse_log2) / (cap log2 e)` clamped to `[-1, 1]` (a masked `p = 0`
    /// gives `-inf`, or NaN on a fully masked row: the clamp returns a bound, and dS is
    /// `p * ... = 0` there either way).
    pub fn dtanh(&self, b: &mut Builder, p: Reg<F32>, lse_log2: Reg<F32>) -> Reg<F32> {
        let y = b.lg2(p);
        let y = b.add_f32(y, lse_log2);
        let t = b.mul_f32(y, self.inv_cap_log2);
        let t = b.min_f32(t, 1.0f32);
        let t = b.max_f32(t, -1.0f32);
        let neg = b.neg_f32(t);
        b.fma_f32(neg, t, 1.0f32)
    }
}
