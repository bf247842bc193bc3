//! Kernel layer, sm_90a: one tile of a consumer warpgroup (see `fwd_consumer`) under the
//! softmax its scores take: FA2's running max, or, for a softcap's bounded scores
//! (`Variant::fixed_ref`), one fixed reference for every row (`OnlineSoftmax::fixed`)
//! where the cap lets it serve, the running max elsewhere (a uniform branch per tile).

use super::fwd_consumer::{Consumer, Wg};
use super::fwd_ctx::Ctx;
use super::fwd_turn::Turn;
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::{B32, Builder, F32, Reg};
use crate::tile::acc::AccTile;

impl Consumer {
    /// The key-block loop; returns O (normalised), the rows' LSE and the warpgroup's view
    /// (for the epilogue). `overlap`: each block's S = Q K^T is issued before the previous
    /// block's O += P V and its softmax runs while that product is in flight (FA3's
    /// intra-warpgroup overlap); otherwise every product is waited for at once.
    /// `turn` (pingpong): the consumers take turns to issue their products. `j`: the
    /// CTA's tiles before this one (the parity of Q's barrier).
    pub(super) fn consume(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        (tid, wg, m0): (Reg<B32>, Reg<B32>, Reg<B32>),
        (overlap, turn): (bool, Option<Turn>),
        j: Reg<B32>,
    ) -> (AccTile, Vec<Reg<F32>>, Wg) {
        let w = self.setup(b, ctx, (tid, wg, m0), (turn, j));
        let mut o = AccTile::zeros(b, 1, ctx.d);
        // the tile's key blocks on the fixed reference given, or on the running max
        let tile = |b: &mut Builder, o: &mut AccTile, fixed: Option<Reg<F32>>| {
            let rows = o.rows();
            let softmax = match fixed {
                Some(r) => OnlineSoftmax::fixed(b, rows, self.softmax_scale, r),
                None => OnlineSoftmax::new(b, rows, self.softmax_scale),
            };
            let softmax = softmax.with_fma_exp2(self.fma_exp2);
            self.key_blocks(b, (ctx, &w), overlap, softmax, o)
        };
        let Some((fits, reference)) = self.fixed_ref else {
            let lse = tile(b, &mut o, None);
            return (o, lse, w);
        };
        // both arms leave O and the LSE in the same registers
        let lse: Vec<Reg<F32>> = (0..o.rows()).map(|_| b.reg()).collect();
        for fixed in [Some(reference), None] {
            let arm = |b: &mut Builder| {
                b.comment(match fixed {
                    Some(_) => "-- the tile on the softcap's fixed reference --",
                    None => "-- the tile on the running max (a cap too large for one reference) --",
                });
                for (&d, x) in lse.iter().zip(tile(b, &mut o, fixed)) {
                    b.assign(d, x);
                }
            };
            match fixed {
                Some(_) => b.if_uniform(fits, arm),
                None => b.unless_uniform(fits, arm),
            }
        }
        (o, lse, w)
    }

    /// The tile's key blocks under `softmax` (fresh), overlapped or not; O normalised,
    /// the rows' LSE returned.
    fn key_blocks(
        &self,
        b: &mut Builder,
        (ctx, w): (&Ctx, &Wg),
        overlap: bool,
        mut softmax: OnlineSoftmax,
        o: &mut AccTile,
    ) -> Vec<Reg<F32>> {
        if overlap {
            self.blocks_overlapped(b, ctx, w, &mut softmax, o);
        } else {
            self.blocks(b, ctx, w, &mut softmax, o);
        }
        softmax.finish(b, o)
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::sm90::fwd::{Variant, module};
    use crate::ptx::print;
    use crate::spec::{DType, Mask, Scores};

    /// `fixed_ref`: the tile runs in two arms, chosen once per kernel by the cap (82 =
    /// `cap * log2 e`'s limit). The fixed reference's arm holds no row max, vote or
    /// rescale, and every score one `tanh` and one `ex2`; the running max's arm is the
    /// shipping kernel's tile. Without `fixed_ref`, one arm.
    #[test]
    fn the_fixed_reference_arm_has_no_max_vote_or_rescale() {
        for (d, mask) in [(128, Mask::Causal), (64, Mask::None), (128, Mask::Local)] {
            let ship = Variant::shipping_scored(DType::Bf16, d, mask, Scores::Softcap);
            let consumer = |var: Variant| {
                let ptx = print::module(&module(var));
                let (_, c) = ptx.split_once("setmaxnreg.inc").expect("two roles");
                c.to_string()
            };
            let fixed_ptx = consumer(Variant {
                fixed_ref: true,
                ..ship
            });
            let (head, rest) = fixed_ptx
                .split_once("-- the tile on the softcap's fixed reference --")
                .expect("the fixed arm");
            let (fixed, running) = rest
                .split_once("-- the tile on the running max")
                .expect("the running arm");
            assert!(
                head.contains("setp.le.f32") && head.contains("0f42A40000"),
                "d{d}"
            );
            let count = |c: &str, s: &str| c.matches(s).count();
            for s in ["max.f32", "vote.", "-- new reference max"] {
                assert_eq!(count(fixed, s), 0, "d{d} {mask:?}: {s} in the fixed arm");
            }
            assert!(count(fixed, "tanh.approx") > 0, "d{d}");
            assert_eq!(
                count(fixed, "tanh.approx"),
                count(fixed, "ex2.approx"),
                "d{d}"
            );
            let shipped = consumer(ship);
            assert!(!shipped.contains("fixed reference"), "d{d}");
            assert!(count(running, "-- new reference max") > 0, "d{d}");
            // the running arm is the shipping tile: as many of each as the shipping kernel
            for s in ["tanh.approx", "ex2.approx", "wgmma.mma_async"] {
                let tail = |c: &str| {
                    let c = c.split("-- the tile on the running max").last().unwrap();
                    let c = c.split_once("-- visits no row").map_or(c, |x| x.1);
                    count(c.split("-- the last block's P V").next().unwrap(), s)
                };
                assert_eq!(tail(running), tail(&shipped), "d{d} {mask:?}: {s}");
            }
        }
    }
}
