//! The sm_90a forward's problem ([`Sm90FwdShape`]) and the one place its kernel variant is
//! made from it ([`fwd_variant`]), with the checks that refuse a shape the kernel lacks.

use flash_codegen::kernels::sm90::fwd;
use flash_codegen::{DType, Scores};

use crate::error::{FlashError, Result};

/// The problem of [`FlashAttention::launch_fwd_sm90`]: q, o `[batch, seqlen_q, heads,
/// head_dim]`, k, v `[batch, seqlen_k, heads_k, head_dim]`, all contiguous there (a
/// `forward_into` call the sm_90a forward runs takes its strides from its tensors).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sm90FwdShape {
    /// Batch.
    pub batch: usize,
    /// Query positions.
    pub seqlen_q: usize,
    /// Key positions (at least 1).
    pub seqlen_k: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (dividing `heads`).
    pub heads_k: usize,
    /// 64 or 128.
    pub head_dim: usize,
    /// Causal mask, bottom-right aligned (query i sees keys up to i + seqlen_k - seqlen_q).
    pub causal: bool,
    /// A sliding window `(left, right)` instead (not with `causal`): query i sees keys
    /// i + seqlen_k - seqlen_q - left ..= i + seqlen_k - seqlen_q + right, `u32::MAX`
    /// unbounded (`AttnParams`' -1).
    pub window: Option<(u32, u32)>,
    /// The score transform (`fwd::Variant::scores`; its values are
    /// [`FlashAttention::launch_fwd_sm90_scored`]'s).
    pub scores: Scores,
    /// Of every 4 n-tiles of S, how many make their probabilities on the FMA pipe
    /// (`fwd::Variant::fma_exp2`); `None`: the kernel's default
    /// (`fwd::Variant::default_fma_exp2`).
    pub fma_exp2: Option<u32>,
    /// With a softcap, bf16: every row's probabilities on one fixed reference where the
    /// cap lets it serve, the running max beside it for larger caps
    /// (`fwd::Variant::fixed_ref`).
    pub fixed_ref: bool,
    /// FA3's intra-warpgroup overlap (`fwd::Variant::overlap`).
    pub overlap: bool,
    /// The consumers take turns to issue their products (`fwd::Variant::pingpong`).
    pub pingpong: bool,
    /// Consumer warpgroups (64 query rows each): 2, or 3 at d64; `None`: the kernel's
    /// default (`fwd::Variant::default_consumers`).
    pub consumers: Option<u32>,
    /// A persistent grid (one CTA per SM walking the tiles; `fwd::Variant::persistent`).
    pub persistent: bool,
    /// With `persistent`: the tiles claimed from a counter (`fwd::Variant::dynamic`; the
    /// runtime keeps a zeroed counter per stream).
    pub dynamic: bool,
    /// With `persistent`, `overlap` and `pingpong`: the tile edges pipelined
    /// (`fwd::Variant::chained`).
    pub chained: bool,
    /// The epilogue through shared memory and TMA (`fwd::Variant::tma_store`).
    pub tma_store: bool,
    /// With `dynamic`: each next tile's Q loaded early (`fwd::Variant::q_ahead`).
    pub q_ahead: bool,
    /// With `window`: each masked key block checks only the window edges it crosses
    /// (`fwd::Variant::edge_masks`).
    pub edge_masks: bool,
    /// The debug build: mbarrier waits bounded, failing with the barrier's name.
    pub debug: bool,
}

impl Sm90FwdShape {
    /// The problem of `sizes` (`(batch, seqlen_q, seqlen_k, heads, heads_k, head_dim)`)
    /// with `window` (if `var` has one) and `scores`, on `var`'s schedule and options (its
    /// causal mask, grid, epilogue; the default consumers and FMA share).
    pub(crate) fn on(
        var: &fwd::Variant,
        (batch, seqlen_q, seqlen_k, heads, heads_k, head_dim): (
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
        ),
        window: Option<(u32, u32)>,
        scores: Scores,
    ) -> Self {
        Sm90FwdShape {
            batch,
            seqlen_q,
            seqlen_k,
            heads,
            heads_k,
            head_dim,
            causal: var.causal,
            window: window.filter(|_| var.window),
            scores,
            fma_exp2: None,
            fixed_ref: var.fixed_ref,
            overlap: var.overlap,
            pingpong: var.pingpong,
            consumers: None,
            persistent: var.persistent,
            dynamic: var.dynamic,
            chained: var.chained,
            tma_store: var.tma_store,
            q_ahead: var.q_ahead,
            edge_masks: var.edge_masks,
            debug: var.debug,
        }
    }

    /// `(batch, seqlen_q, seqlen_k, heads, heads_k, head_dim)`.
    pub fn sizes(&self) -> (usize, usize, usize, usize, usize, usize) {
        (
            self.batch,
            self.seqlen_q,
            self.seqlen_k,
            self.heads,
            self.heads_k,
            self.head_dim,
        )
    }
}

/// The kernel variant of `sh` for `dtype` (head dim checked by the caller): the one place
/// a `fwd::Variant` is made, for [`FlashAttention::launch_fwd_sm90`] and for
/// `FlashAttention::forward_into` (through `validate::sm90_fwd_call`).
pub(crate) fn fwd_variant(dtype: DType, sh: &Sm90FwdShape) -> Result<fwd::Variant> {
    let head_dim = sh.head_dim as u32;
    let consumers = sh
        .consumers
        .unwrap_or_else(|| fwd::Variant::default_consumers(head_dim));
    if !(consumers == 2 || (consumers == 3 && head_dim == 64)) {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: the sm_90a forward runs 2 consumer warpgroups, or 3 at head dim 64"
        )));
    }
    if sh.dynamic && !sh.persistent {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: the dynamic scheduler runs on the persistent grid (set persistent too)"
        )));
    }
    if sh.chained && !(sh.persistent && sh.overlap && sh.pingpong) {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: chained tiles run on the persistent grid with the overlapped pingpong \
             schedule (set persistent, overlap and pingpong too)"
        )));
    }
    if sh.q_ahead && (!sh.dynamic || sh.chained) {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: the next tile's Q early (q_ahead) runs with the dynamic scheduler, \
             unchained"
        )));
    }
    if sh.edge_masks && sh.window.is_none() {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: masks per window edge (edge_masks) need a window"
        )));
    }
    if sh.fixed_ref && (sh.scores != Scores::Softcap || dtype != DType::Bf16 || sh.chained) {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: a fixed softmax reference (fixed_ref) needs a softcap's bounded scores, \
             bf16 and unchained tiles"
        )));
    }
    if sh.window.is_some() && sh.causal {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: a window or the causal mask, not both (causal is the window (-1, 0))"
        )));
    }
    // the window's block arithmetic sums seqlen_q, seqlen_k and a tile's rows in i32
    if sh.window.is_some() && sh.seqlen_q + sh.seqlen_k + 256 >= 1 << 31 {
        return Err(FlashError::ShapeMismatch(format!(
            "{sh:?}: a sliding window needs seqlen_q + seqlen_k below 2^31 - 256"
        )));
    }
    let fma_exp2 = sh
        .fma_exp2
        .unwrap_or_else(|| fwd::Variant::default_fma_exp2(sh.scores));
    if fma_exp2 > 4 {
        return Err(FlashError::InvalidParam(format!(
            "{sh:?}: fma_exp2 is a share of 4 n-tiles (0 to 4)"
        )));
    }
    Ok(fwd::Variant {
        dtype,
        head_dim,
        causal: sh.causal,
        window: sh.window.is_some(),
        scores: sh.scores,
        fma_exp2,
        fixed_ref: sh.fixed_ref,
        overlap: sh.overlap,
        pingpong: sh.pingpong,
        consumers,
        persistent: sh.persistent,
        dynamic: sh.dynamic,
        chained: sh.chained,
        tma_store: sh.tma_store,
        q_ahead: sh.q_ahead,
        edge_masks: sh.edge_masks,
        debug: sh.debug,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipping kernel's shape: d128, a 1024-key window (Mistral's), one batch.
    fn shipping() -> Sm90FwdShape {
        let ship = fwd::Variant::shipping_for(DType::Bf16, 128, flash_codegen::Mask::Local);
        let sizes = (1, 4096, 4096, 8, 2, 128);
        Sm90FwdShape::on(&ship, sizes, Some((1023, 0)), Scores::Plain)
    }

    #[test]
    fn the_shipping_shape_makes_the_shipping_variant() {
        let var = fwd_variant(DType::Bf16, &shipping()).expect("the shipping variant");
        let ship = fwd::Variant::shipping_for(DType::Bf16, 128, flash_codegen::Mask::Local);
        assert_eq!(var, ship);
        let em = Sm90FwdShape {
            edge_masks: true,
            ..shipping()
        };
        let var = fwd_variant(DType::Bf16, &em).expect("the window with edge masks");
        assert!(
            var.edge_masks && var.name().ends_with("_tst_em_sm90a"),
            "{}",
            var.name()
        );
    }

    #[test]
    fn options_without_what_they_need_are_refused() {
        let ship = shipping();
        let cases = [
            (
                Sm90FwdShape {
                    window: None,
                    edge_masks: true,
                    ..ship
                },
                "edge_masks) need a window",
            ),
            (
                Sm90FwdShape {
                    chained: true,
                    q_ahead: true,
                    ..ship
                },
                "runs with the dynamic scheduler, unchained",
            ),
            (
                Sm90FwdShape {
                    dynamic: false,
                    q_ahead: true,
                    ..ship
                },
                "q_ahead) runs with the dynamic scheduler",
            ),
            (
                Sm90FwdShape {
                    causal: true,
                    ..ship
                },
                "a window or the causal mask, not both",
            ),
            (
                Sm90FwdShape {
                    fixed_ref: true,
                    ..ship
                },
                "fixed_ref) needs a softcap's bounded scores",
            ),
            (
                Sm90FwdShape {
                    fma_exp2: Some(5),
                    ..ship
                },
                "fma_exp2 is a share of 4 n-tiles",
            ),
            (
                Sm90FwdShape {
                    consumers: Some(3),
                    ..ship
                },
                "2 consumer warpgroups, or 3 at head dim 64",
            ),
        ];
        for (sh, want) in cases {
            let e = fwd_variant(DType::Bf16, &sh).expect_err(want).to_string();
            assert!(e.contains(want), "`{e}` lacks `{want}`");
        }
    }
}
