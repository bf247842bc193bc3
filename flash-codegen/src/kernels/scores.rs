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
use crate::abi::{ALIBI_BATCH_STRIDE, ALIBI_SLOPES, SOFTCAP};
use crate::ptx::{Addr, B32, B64, Builder, F32, LdCache, Reg, Space, Ty};
use crate::spec::{KernelSpec, Scores};
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
            // (ALiBi's bias is [`AlibiBias`], added where the rows are known)
            Scores::Plain | Scores::Alibi => (None, scale_log2),
            Scores::Softcap => {
                let (t, cap_log2) = Self::softcap(b, p.get(SOFTCAP), scale_log2);
                (Some(t), cap_log2)
            }
        }
    }

    /// The softcap of cap `cap` (a register: any kernel's parameter), and the scale the
    /// softmax applies after it, `cap * log2 e`.
    pub fn softcap(b: &mut Builder, cap: Reg<F32>, scale_log2: Reg<F32>) -> (Self, Reg<F32>) {
        // scale / cap = scale_log2 / (cap * log2 e)
        let cap_log2 = b.mul_f32(cap, LOG2_E);
        let inv = b.rcp(cap_log2);
        let pre = b.mul_f32(scale_log2, inv);
        (ScoreTransform { pre }, cap_log2)
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

    /// The bound of the transformed scores as the softmax scales them (`softmax_scale`,
    /// `cap * log2 e`): `|tanh| <= 1`, so every `t * softmax_scale` lies within
    /// `[-softmax_scale, softmax_scale]`.
    pub fn scaled_bound(&self, softmax_scale: Reg<F32>) -> Reg<F32> {
        softmax_scale
    }

    /// Each thread row's max of the transformed scores of `s` (raw products, this
    /// warp's columns), from the raw max: `tanh` is monotone, so the max is one `tanh` per
    /// row and does not wait for the elements' (the softmax's `ex2`s can follow them on
    /// the multi-function unit at once). Only for a block without a mask: a masked
    /// product is -inf only after the transform.
    pub fn block_max(&self, b: &mut Builder, s: &AccTile) -> Vec<Reg<F32>> {
        let lowest = b.mov(f32::NEG_INFINITY);
        (0..s.rows())
            .map(|row| {
                let raw = s.row_max(b, row, lowest);
                let y = b.mul_f32(raw, self.pre);
                b.tanh(y)
            })
            .collect()
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

/// Which index a tile's rows hold: queries (S = Q K^T) or keys (the backward's S^T).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowsOf {
    /// Rows are queries, columns keys.
    Queries,
    /// Rows are keys, columns queries.
    Keys,
}

/// One thread's rows of a score tile: the block's first row `base`, the thread's first
/// row's offset in it (its later rows lie [`AccTile::row_offset`] further), `t2 = 2 *
/// (lane & 3)` and which index they hold.
#[derive(Clone, Copy, Debug)]
pub struct TileRows {
    /// The block's first row (absolute query or key index).
    pub base: Reg<B32>,
    /// The thread's first row's offset from `base`.
    pub row0: Reg<B32>,
    /// The thread's first column in each n-tile.
    pub t2: Reg<B32>,
    /// What the rows index.
    pub of: RowsOf,
}

/// ALiBi's bias on one thread's rows ([`Scores::Alibi`]): `-slope * |i + shift - j|` in
/// the raw product's units (`-slope / scale` per key of distance), so the softmax's scale,
/// max and exponent stay its own. The distance is formed in f32 (exact below 2^24 keys;
/// beyond, the bias is past -2^16 * slope anyway). The backward needs no factor in dS (the
/// bias does not depend on the scores).
pub struct AlibiBias {
    rows: BiasRows,
}

/// Where a tile's rows take their slope and distance from.
enum BiasRows {
    /// One head: `slope / scale = slope * log2 e / scale_log2`, and the distance's part
    /// from the thread's first row, `i + shift - 2t` (rows are queries) or `j - shift -
    /// 2t` (rows are keys); thread row r lies [`AccTile::row_offset`]`(r)` further, an
    /// immediate (one register for every row).
    Head { slope: Reg<F32>, rel0: Reg<B32> },
    /// Packed GQA rows (split-KV): each thread row its own head's slope and its own
    /// position's `pos + shift - 2t`.
    Packed {
        slopes: Vec<Reg<F32>>,
        rels: Vec<Reg<B32>>,
    },
}

/// Where the slopes are: the f32 buffer and its batch stride (0 for `[heads]`).
#[derive(Clone, Copy, Debug)]
pub struct Slopes {
    /// The buffer's address (`alibi_slopes`).
    pub ptr: Reg<B64>,
    /// Slopes per batch entry (`alibi_batch_stride`).
    pub batch_stride: Reg<B32>,
}

impl Slopes {
    /// The sm_80 kernels' parameters `alibi_slopes` and `alibi_batch_stride`.
    pub fn of(p: &Params) -> Self {
        Slopes {
            ptr: p.get(ALIBI_SLOPES),
            batch_stride: p.get(ALIBI_BATCH_STRIDE),
        }
    }
}

/// The slope of `head` in `batch`, divided by the scale (`slope * log2 e / scale_log2`).
fn scaled_slope(
    b: &mut Builder,
    slopes: Slopes,
    (batch, head): (Reg<B32>, Reg<B32>),
    scale_log2: Reg<F32>,
) -> Reg<F32> {
    let base = b.cvta_global(slopes.ptr);
    let at = b.mad_lo_u32(batch, slopes.batch_stride, head);
    let addr = b.mad_wide_u32(at, 4u32, base);
    let [slope]: [Reg<F32>; 1] = b.ld(
        Space::Global,
        LdCache::NonCoherent,
        Ty::F32,
        Addr::Global(addr, 0),
    );
    let inv = b.rcp(scale_log2);
    let slope = b.mul_f32(slope, LOG2_E);
    b.mul_f32(slope, inv)
}

impl AlibiBias {
    /// The bias of an [`Scores::Alibi`] kernel `spec` (`None` for other scores): the head's
    /// slope `slopes[batch * alibi_batch_stride + head]` (query head), read once, and the
    /// rows' parts of the distance.
    pub fn load(
        b: &mut Builder,
        p: &Params,
        spec: &KernelSpec,
        (batch, head): (Reg<B32>, Reg<B32>),
        scale_log2: Reg<F32>,
        rows: TileRows,
        (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
    ) -> Option<Self> {
        (spec.scores == Scores::Alibi).then(|| {
            Self::head(
                b,
                Slopes::of(p),
                (batch, head),
                scale_log2,
                rows,
                (seqlen_q, seqlen_k),
            )
        })
    }

    /// The bias of one head's rows: its slope `slopes[batch * batch_stride + head]`, read
    /// once, and the rows' parts of the distance.
    pub fn head(
        b: &mut Builder,
        slopes: Slopes,
        (batch, head): (Reg<B32>, Reg<B32>),
        scale_log2: Reg<F32>,
        rows: TileRows,
        (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
    ) -> Self {
        {
            b.comment("-- ALiBi: the head's slope, each row's diagonal --");
            let slope = scaled_slope(b, slopes, (batch, head), scale_log2);
            let shift = b.sub_s32(seqlen_k, seqlen_q);
            // the row's diagonal, in column indices
            let diag0 = match rows.of {
                RowsOf::Queries => b.add_s32(rows.base, shift),
                RowsOf::Keys => b.sub_s32(rows.base, shift),
            };
            let first = b.sub_s32(diag0, rows.t2);
            debug_assert_eq!(AccTile::row_offset(0), 0);
            let rel0 = b.add_s32(first, rows.row0);
            AlibiBias {
                rows: BiasRows::Head { slope, rel0 },
            }
        }
    }

    /// The bias of an [`Scores::Alibi`] split-KV kernel over packed GQA rows (`None` for
    /// other scores): thread row r is query position `positions[r]` of query head
    /// `heads[r]`, each head's slope read once.
    pub fn packed(
        b: &mut Builder,
        p: &Params,
        spec: &KernelSpec,
        (batch, heads, positions): (Reg<B32>, &[Reg<B32>], &[Reg<B32>]),
        (t2, scale_log2): (Reg<B32>, Reg<F32>),
        (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
    ) -> Option<Self> {
        (spec.scores == Scores::Alibi).then(|| {
            b.comment("-- ALiBi: each packed row's head's slope and diagonal --");
            let shift = b.sub_s32(seqlen_k, seqlen_q);
            let slopes = (heads.iter())
                .map(|&h| scaled_slope(b, Slopes::of(p), (batch, h), scale_log2))
                .collect();
            let rels = (positions.iter())
                .map(|&pos| {
                    let diag = b.add_s32(pos, shift);
                    b.sub_s32(diag, t2)
                })
                .collect();
            AlibiBias {
                rows: BiasRows::Packed { slopes, rels },
            }
        })
    }

    /// Adds the bias to the raw products `s` of the block whose columns start at `c0` (a
    /// key, or a query where rows are keys), before the mask (a masked score stays -inf):
    /// `x0 = slope * (rel - c0)` for the thread's first row (the distance an exact integer
    /// first, so a score's error stays relative to its own bias), then per element `s -=
    /// |x0 + slope * (row - col)|`, an FMA with the row and column offsets as an immediate
    /// and a subtraction of its absolute value (ptxas folds `abs` into the FADD's operand:
    /// two instructions per score, one register for the block).
    pub fn apply(&self, b: &mut Builder, s: &mut AccTile, c0: Reg<B32>) {
        b.comment("-- ALiBi: S -= |slope / scale * (i + shift - j)| --");
        let x0 = |b: &mut Builder, rel: Reg<B32>, slope: Reg<F32>| {
            let d0 = b.sub_s32(rel, c0);
            let d0 = b.cvt_f32_s32(d0);
            b.mul_f32(d0, slope)
        };
        // (slope, x0, the thread row's offset from x0's row) of each thread row
        let per_row: Vec<(Reg<F32>, Reg<F32>, u32)> = match &self.rows {
            BiasRows::Head { slope, rel0 } => {
                let x = x0(b, *rel0, *slope);
                (0..s.rows())
                    .map(|r| (*slope, x, AccTile::row_offset(r)))
                    .collect()
            }
            BiasRows::Packed { slopes, rels } => (slopes.iter().zip(rels))
                .map(|(&slope, &rel)| (slope, x0(b, rel, slope), 0))
                .collect(),
        };
        s.map(b, |b, at, x| {
            let (slope, x0, row) = per_row[at.row];
            let d = b.fma_f32(row as f32 - at.col() as f32, slope, x0);
            let ad = b.abs_f32(d);
            b.sub_f32(x, ad)
        });
    }
}
