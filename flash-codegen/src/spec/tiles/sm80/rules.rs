//! Spec layer: the rules an sm_80 tile row must satisfy for its pass and head dim, each
//! next to the kernel code that relies on it.

use super::Sm80Layout::{KeySplit, Streamed};
use super::Sm80Tiles;
use crate::spec::Pass;

impl Sm80Tiles {
    /// The rules every kernel builder relies on, for (pass, head dim `d`).
    pub(in crate::spec::tiles) fn check(&self, pass: Pass, d: u32) -> Result<(), String> {
        let t = self;
        let (bm, bn, warps) = (t.block_m, t.block_n, t.warps);
        if pass == Pass::FwdCombine {
            // (kernels::combine) one row per CTA, the warps taking runs of the splits in
            // turn, or one row per warp
            let rows_ok = bm == 1 || bm == warps;
            return match rows_ok && warps > 0 && 16 % warps == 0 && t.layout == Streamed {
                true => Ok(()),
                false => Err(
                    "fwdcombine: 1, 2, 4, 8 or 16 warps and block_m 1 (a row per \
                     CTA) or block_m = warps (a row per warp)"
                        .into(),
                ),
            };
        }
        if matches!(pass, Pass::BwdPre | Pass::BwdPost | Pass::BwdKvSum) {
            return match warps > 0 && bm % warps == 0 && t.layout == Streamed && t.sweeps == 1 {
                true => Ok(()),
                false => Err("elementwise passes: block_m rows, one per warp at a time".into()),
            };
        }
        if warps == 0 || bm == 0 || bn == 0 || bm % 16 != 0 || bn % 16 != 0 {
            return Err("block_m and block_n must be multiples of 16, warps at least 1".into());
        }
        if !t.stages.is_power_of_two()
            || (t.stages == 1 && !matches!(pass, Pass::Fwd | Pass::FwdSplit))
        {
            return Err(
                "stages must be a power of two (1 only for fwd and fwdsplit: K and V take turns)"
                    .into(),
            );
        }
        if !(1..=2).contains(&t.sweeps) || (t.sweeps == 2 && pass != Pass::Bwd) {
            return Err("sweeps is 1, or 2 for bwd".into());
        }
        if t.layout.exchange() && !matches!(pass, Pass::Bwd | Pass::Fwd) {
            return Err("exchange is a fwd and bwd layout".into());
        }
        if t.layout.key_split() {
            // (kernels::sm80::key_split) one m16 tile shared by the warps, 16-key slices
            // of each block; the merge scratch ((warps - 1) accumulators and the row
            // statistics) reuses the K/V buffers
            let dp = d.div_ceil(64) * 64;
            let merge = (warps - 1) * d * 64 + warps * 16 * 8;
            let stream = 2 * t.stages * bn * dp * 2;
            if pass != Pass::FwdSplit
                || bm != 16
                || warps < 2
                || bn % (16 * warps) != 0
                || t.stages < 2
                || merge > stream
            {
                return Err(
                    "keysplit: fwdsplit only, block_m 16, 2 or more warps, block_n a \
                            multiple of 16 warps, 2 or more stages, the merge within the K/V \
                            buffers"
                        .into(),
                );
            }
        }
        if pass == Pass::FwdSplit && !matches!(t.layout, Streamed | KeySplit) {
            return Err("fwdsplit: the streamed or keysplit layout".into());
        }
        if t.layout.late_prefetch() && pass != Pass::Bwd {
            return Err("late (prefetch) is a bwd option of the exchange layouts".into());
        }
        let dp = d.div_ceil(64) * 64;
        match (pass, t.layout.exchange()) {
            // (kernels::sm80::fwd_exchange) two m-tiles per warp, G >= 2 warps per 32-row
            // block splitting the keys and whole 64-column panels of d; one named barrier
            // (1..15) per row block
            (Pass::Fwd, true) => {
                let blocks = bm / 32;
                let g = if bm % 32 == 0 && blocks > 0 {
                    warps / blocks
                } else {
                    0
                };
                if g < 2
                    || warps != g * blocks
                    || blocks >= 16
                    || d % (64 * g) != 0
                    || bn % (16 * g) != 0
                {
                    return Err(
                        "fwd exchange: block_m a multiple of 32 (below 512); warps = G x \
                                block_m / 32 with G >= 2; head dim a multiple of 64 G; block_n \
                                of 16 G"
                            .into(),
                    );
                }
            }
            // (kernels::sm80::bwd_exchange) 32 keys per warp, G = warps / (block_n / 32)
            // groups splitting the query block in m16 tiles and the panels of d
            (Pass::Bwd, true) => {
                let blocks = bn / 32;
                let g = if bn % 32 == 0 && blocks > 0 && warps % blocks == 0 {
                    warps / blocks
                } else {
                    0
                };
                if g == 0
                    || t.sweeps != 1
                    || d != dp
                    || (dp / 64) % g != 0
                    || bm % (16 * g) != 0
                    || bm > 64
                {
                    return Err(
                        "bwd exchange: block_n a multiple of 32 dividing 32 warps into G \
                                groups; one sweep; head dim a multiple of 64 G; block_m a \
                                multiple of 16 G, at most 64"
                            .into(),
                    );
                }
            }
            // every warp owns block_n / warps keys (m16 tiles); dS^T one 64-column panel
            (Pass::Bwd, false) => {
                if bn % (16 * warps) != 0 || bm > 64 {
                    return Err("bwd: block_n a multiple of 16 warps, block_m at most 64".into());
                }
            }
            // (checked above) every warp owns the 16 rows
            (Pass::FwdSplit, false) if t.layout.key_split() => {}
            // every warp owns block_m / warps query rows (m16 tiles)
            _ => {
                if bm % (16 * warps) != 0 {
                    return Err("block_m must be a multiple of 16 warps".into());
                }
            }
        }
        // (tile::copy) the cp.async copies of Q, K, V (and dO): a row's 16-byte chunks,
        // rounded up to a power of two, on consecutive threads, the CTA covering whole rows
        // at each step
        let chunks = (d / 8).next_power_of_two();
        let threads = 32 * warps;
        if threads % chunks != 0 || bm % (threads / chunks) != 0 || bn % (threads / chunks) != 0 {
            return Err(format!(
                "copies: {threads} threads over {chunks}-chunk rows need block_m and block_n \
                 to be multiples of {}",
                (threads / chunks).max(1)
            ));
        }
        // (kernels::sm80::bwd_atomic_dq::dq_split) the atomic dQ: the warps tile the query
        // block in m16 rows times column groups of whole 64-column panels
        let row_tiles = bm / 16;
        if pass == Pass::Bwd && (warps % row_tiles != 0 || (dp / 64) % (warps / row_tiles) != 0) {
            return Err(
                "bwd dQ: warps a multiple of block_m / 16, the quotient dividing the \
                        head dim's 64-column panels"
                    .into(),
            );
        }
        Ok(())
    }
}
