//! Spec layer: the sm_80 path's tile rows (mma.sync warps, cp.async stages), their
//! table, and the rules a row must satisfy.

use serde::{Deserialize, Serialize};

use super::super::{KernelSpec, Pass, Tiling};
use Sm80Layout::{Exchange, ExchangeLatePrefetch, Resident, Streamed};

/// Geometry of one sm_80 kernel: every choice the kernel body reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sm80Tiles {
    /// Query rows per CTA.
    pub block_m: u32,
    /// Key/value rows per main-loop iteration.
    pub block_n: u32,
    /// Warps per CTA; each owns `block_m / warps` query rows (see [`Sm80Layout`]).
    pub warps: u32,
    /// Shared-memory buffers of the streamed operand (K/V in the forward, Q/dO in the
    /// backward), a power of two: 2 = load block j+1 while computing block j; 1 (forward
    /// only) = one K and one V buffer taking turns (V_j loads during Q K_j^T).
    pub stages: u32,
    /// Backward only: passes over the query blocks. 1 = dV and dK together; 2 = dV first,
    /// then dK and dQ, when both accumulators (d/2 f32 each per thread) don't fit at once.
    pub sweeps: u32,
    /// How the warps split the work and where operand fragments live.
    pub layout: Sm80Layout,
}

/// How an sm_80 kernel's warps split a block, and where operand fragments live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sm80Layout {
    /// Each warp owns `block_m / warps` rows (`block_n / warps` keys in the backward main
    /// pass); operand fragments are read from shared memory at every product.
    Streamed,
    /// As [`Sm80Layout::Streamed`], with the operand fragments kept in registers for the
    /// whole CTA: Q in the forward, K and V in the backward main pass, Q and dO in the dQ
    /// pass. Saves ldmatrix traffic; costs registers.
    Resident,
    /// FA2's warp layouts. Forward (`kernels::sm80::fwd_exchange`): warps pair up on
    /// 32-row blocks, splitting each key block for S and the head dim for O, P through
    /// shared memory. Backward main pass (`kernels::sm80::bwd_exchange`): warps tile the
    /// key block in 32-key rows (two m-tiles each) times `warps / (block_n / 32)` groups
    /// that split the query block for S^T and dP^T and the head dim for dV and dK; P^T
    /// and dS^T pass between the layouts through shared memory. Every B fragment then
    /// feeds two mma.
    Exchange,
    /// The backward's [`Sm80Layout::Exchange`] with the next query block's copies issued
    /// after the step's first product (S^T) instead of right after the iteration's
    /// barrier, where they would queue behind the previous block's burst of dQ atomics.
    ExchangeLatePrefetch,
}

impl Sm80Layout {
    /// Operand fragments stay in registers.
    pub fn resident(self) -> bool {
        self == Resident
    }
    /// One of the exchange layouts.
    pub fn exchange(self) -> bool {
        matches!(self, Exchange | ExchangeLatePrefetch)
    }
    /// The streamed operand's next block is fetched after the first product.
    pub fn late_prefetch(self) -> bool {
        self == ExchangeLatePrefetch
    }
}

/// The forward tile table (sm_80 path). Rows: head_dim -> (block_m, block_n, warps, stages).
/// Each warp owns block_m / warps query rows (one or two m16 tiles): two tiles share every
/// K/V fragment loaded from shared memory, halving ldmatrix traffic per mma; above d160
/// the O accumulator (d/2 f32 per m-tile per thread) only fits with one. d224/d256 take
/// FA2's 64x64 with one K and one V buffer taking turns (stages = 1), measured 5-11% faster
/// than 64x32 double-buffered (docs/performance.md). Shared memory stays <= 96 KiB so
/// every variant also runs on RTX 30/40 (99 KiB per block).
/// d256 splits each key block and the head dim between pairs of warps (`exchange`, see
/// `kernels::sm80::fwd_exchange`): 21% fewer shared-memory bytes per mma, +5-9% non-causal and
/// up to +6% causal (session 8, gpu_tune bf16: 16K 329 -> 350 TFLOP/s), for 104.5 KiB
/// of shared memory; GPUs with less per block run [`FWD_COMPACT_TILES`].
#[rustfmt::skip]
pub(crate) const FWD_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(128, 64, 4, 2, 1).with(Resident)),
    (64, tc(128, 64, 4, 2, 1).with(Resident)),
    (96, tc(128, 64, 4, 2, 1)),
    (128, tc(128, 32, 4, 2, 1)),
    (160, tc(128, 16, 4, 2, 1)),
    (192, tc(64, 32, 4, 2, 1).with(Resident)),
    (224, tc(64, 64, 4, 1, 1)),
    (256, tc(64, 64, 4, 1, 1).with(Exchange)),
];

/// The forward's rows for GPUs whose shared memory per block is below the standard
/// row's ([`super::Tiling::Compact`]; RTX 30/40 allow 99 KiB): the same block_m and
/// warps (so the same grid), 96 KiB.
#[rustfmt::skip]
pub(crate) const FWD_COMPACT_TILES: [(u32, Sm80Tiles); 1] = [
    (256, tc(64, 64, 4, 1, 1)),
];

/// Backward main pass (one CTA per key block): block_n keys per CTA (16 per warp; with
/// `exchange`, 32-key row blocks times column groups),
/// block_m queries per inner step; for dQ the warps split into query tiles times column
/// groups of whole 64-column panels (`kernels::sm80::bwd_atomic_dq::dq_split`). Q, dO, LSE and D are
/// double buffered; K, V and two dS^T tiles stay resident. d160-d224 take two sweeps (dV,
/// then dK and dQ); d128 and d256 run FA2's warp layouts (`exchange`: each warp 32 keys
/// x half (d128, 4 warps) or a quarter (d256, 8 warps) of the head dim for dV and dK,
/// P^T and dS^T through shared memory). d128 on 64x64 with 4 warps leaves room for two
/// CTAs per SM (255 registers, 115 KB): session 5 measured 0.91-1.00x FA2 against
/// 0.85-0.88x for 64x128 on 8 warps (the previous row, kept buildable with `--tile
/// bwd:128=64,128,8,2,1`, tests/ptxas_variants.rs), 0.90-0.95x for 64x64 without
/// exchange and 0.88-0.92x for 64x128 with it (`docs/performance.md`). Session 6 (dP^T in
/// one piece): 0.98-1.01x at 16K. From 8192 query rows on, d128 runs its long row
/// ([`BWD_LONG_TILES`]) in atomic mode. d64 runs 128 keys on 4 warps, 32 keys (two
/// m-tiles) per warp, K and V read from shared memory: every Q and dO fragment feeds two
/// mma and the dQ atomics per FLOP halve; session 8 (gpu_tune, bf16): 1.15-1.17x FA2
/// against 0.99-1.03x for the 64-key resident row at 4K-16K.
#[rustfmt::skip]
pub(crate) const BWD_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(64, 64, 4, 2, 1).with(Resident)),
    (64, tc(64, 128, 4, 2, 1)),
    (96, tc(64, 64, 4, 2, 1).with(Resident)),
    (128, tc(64, 64, 4, 2, 1).with(Exchange)),
    (160, tc(64, 64, 4, 2, 2)),
    (192, tc(64, 64, 4, 2, 2)),
    (224, tc(64, 64, 4, 2, 2)),
    (256, tc(64, 64, 8, 2, 1).with(Exchange)),
];

/// The backward main pass's rows for long sequences ([`super::Tiling::Long`]): (head
/// dim, the fewest query rows it is chosen for, tiles). d128: FA2's 128 keys on 8 warps
/// with the late prefetch, half the dQ atomics per FLOP of the 64-key row but one CTA per
/// SM instead of two. Session 7 (gpu_tune, bf16, ratio to FA2, 64-key -> 128-key):
/// 2K 1.00 -> 0.98, causal 1.02 -> 0.97; 4K 1.00 -> 0.99, causal 1.02 -> 0.99; 8K 0.99
/// -> 1.00, causal 1.00 -> 1.00; 12K 0.99 -> 1.00; 16K 0.97-0.99 -> 1.00-1.01
/// (`docs/bench/tune_session7.txt`). Atomic mode only: the deterministic mode's main
/// pass has no atomics to halve.
#[rustfmt::skip]
pub(crate) const BWD_LONG_TILES: [(u32, u32, Sm80Tiles); 1] = [
    (128, 8192, tc(64, 128, 8, 2, 1).with(ExchangeLatePrefetch)),
];

/// Deterministic dQ pass (one CTA per query block, like the forward): one m16 tile per
/// warp with Q and dO fragments resident, or (d128) two m-tiles sharing every K and V
/// fragment (measured up to 4% faster than 64x64 resident).
#[rustfmt::skip]
pub(crate) const BWD_DQ_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(64, 64, 4, 2, 1).with(Resident)),
    (64, tc(64, 64, 4, 2, 1).with(Resident)),
    (96, tc(64, 64, 4, 2, 1).with(Resident)),
    (128, tc(128, 32, 4, 2, 1)),
    (160, tc(64, 32, 4, 2, 1).with(Resident)),
    (192, tc(64, 32, 4, 2, 1)),
    (224, tc(64, 32, 4, 2, 1)),
    (256, tc(64, 32, 4, 2, 1)),
];

/// Elementwise passes (preprocess, postprocess): block_m rows per CTA, one warp per row.
#[rustfmt::skip]
pub(crate) const ELEMENTWISE_TILES: [(u32, Sm80Tiles); 8] = [
    (32, ELEMENTWISE),
    (64, ELEMENTWISE),
    (96, ELEMENTWISE),
    (128, ELEMENTWISE),
    (160, ELEMENTWISE),
    (192, ELEMENTWISE),
    (224, ELEMENTWISE),
    (256, ELEMENTWISE),
];
const ELEMENTWISE: Sm80Tiles = tc(64, 0, 4, 1, 1);

/// A table row: (block_m, block_n, warps, stages, sweeps), streamed layout.
const fn tc(block_m: u32, block_n: u32, warps: u32, stages: u32, sweeps: u32) -> Sm80Tiles {
    Sm80Tiles {
        block_m,
        block_n,
        warps,
        stages,
        sweeps,
        layout: Streamed,
    }
}

impl Sm80Tiles {
    /// The same tiles in `layout`.
    pub const fn with(self, layout: Sm80Layout) -> Self {
        Sm80Tiles { layout, ..self }
    }

    /// Threads per CTA (`32 * warps`).
    pub fn threads(&self) -> u32 {
        self.warps * 32
    }

    /// The rules every kernel builder relies on, for (pass, head dim `d`).
    pub(super) fn check(&self, pass: Pass, d: u32) -> Result<(), String> {
        let t = self;
        let (bm, bn, warps) = (t.block_m, t.block_n, t.warps);
        if matches!(pass, Pass::BwdPre | Pass::BwdPost) {
            return match warps > 0 && bm % warps == 0 && t.layout == Streamed && t.sweeps == 1 {
                true => Ok(()),
                false => Err("elementwise passes: block_m rows, one per warp at a time".into()),
            };
        }
        if warps == 0 || bm == 0 || bn == 0 || bm % 16 != 0 || bn % 16 != 0 {
            return Err("block_m and block_n must be multiples of 16, warps at least 1".into());
        }
        if !t.stages.is_power_of_two() || (t.stages == 1 && pass != Pass::Fwd) {
            return Err(
                "stages must be a power of two (1 only for fwd: K and V take turns)".into(),
            );
        }
        if !(1..=2).contains(&t.sweeps) || (t.sweeps == 2 && pass != Pass::Bwd) {
            return Err("sweeps is 1, or 2 for bwd".into());
        }
        if t.layout.exchange() && !matches!(pass, Pass::Bwd | Pass::Fwd) {
            return Err("exchange is a fwd and bwd layout".into());
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
            // every warp owns block_m / warps query rows (m16 tiles)
            _ => {
                if bm % (16 * warps) != 0 {
                    return Err("block_m must be a multiple of 16 warps".into());
                }
            }
        }
        Ok(())
    }
}

/// The sm_80 row of `spec`: its tiling's row of its pass and head dim. Panics for an
/// unsupported spec.
pub(crate) fn row(spec: &KernelSpec) -> Sm80Tiles {
    tiling_row(spec).unwrap_or_else(|| panic!("{} has no {:?} tile row", spec.name(), spec.tiling))
}

/// The row of `spec`'s tiling, pass and head dim, if the table has one.
pub(crate) fn tiling_row(spec: &KernelSpec) -> Option<Sm80Tiles> {
    let find = |table: &[(u32, Sm80Tiles)]| {
        table
            .iter()
            .find(|(d, _)| *d == spec.head_dim)
            .map(|&(_, t)| t)
    };
    match (spec.tiling, spec.pass) {
        (Tiling::Standard, Pass::Fwd) => find(&FWD_TILES),
        (Tiling::Standard, Pass::Bwd) => find(&BWD_TILES),
        (Tiling::Standard, Pass::BwdDq) => find(&BWD_DQ_TILES),
        (Tiling::Standard, Pass::BwdPre | Pass::BwdPost) => find(&ELEMENTWISE_TILES),
        (Tiling::Long, _) => long_row(spec).map(|(_, t)| t),
        (Tiling::Compact, Pass::Fwd) => find(&FWD_COMPACT_TILES),
        (Tiling::Compact, _) => None,
    }
}

/// The (fewest query rows, tiles) of the long row of `spec`'s pass and head dim.
pub(crate) fn long_row(spec: &KernelSpec) -> Option<(u32, Sm80Tiles)> {
    match spec.pass {
        Pass::Bwd => BWD_LONG_TILES
            .iter()
            .find(|(d, _, _)| *d == spec.head_dim)
            .map(|&(_, from, t)| (from, t)),
        _ => None,
    }
}

/// Parses an sm_80 row `PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,FLAG...]` (flags: `resident`,
/// `exchange`, `late`); the caller checks it.
pub(super) fn parse_row(s: &str) -> Result<(Pass, u32, Sm80Tiles), String> {
    let bad = || {
        format!(
            "bad tile override `{s}`: expected PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,resident][,exchange][,late]"
        )
    };
    let (key, vals) = s.split_once('=').ok_or_else(bad)?;
    let (pass, d) = key.split_once(':').ok_or_else(bad)?;
    let pass = match pass {
        "fwd" => Pass::Fwd,
        "bwd" => Pass::Bwd,
        "bwddq" => Pass::BwdDq,
        _ => return Err(format!("{}: PASS is fwd, bwd or bwddq", bad())),
    };
    let d: u32 = d.parse().map_err(|_| bad())?;
    let parts: Vec<&str> = vals.split(',').collect();
    let mut flags: Vec<&str> = parts.get(5..).unwrap_or_default().to_vec();
    flags.sort_unstable();
    let layout = match flags[..] {
        [] => Streamed,
        ["resident"] => Resident,
        ["exchange"] => Exchange,
        ["exchange", "late"] => ExchangeLatePrefetch,
        ["late"] => {
            return Err(format!(
                "tile override `{s}`: late (prefetch) is a bwd option of the exchange layouts"
            ));
        }
        ["exchange", "resident"] => {
            return Err(format!(
                "tile override `{s}`: exchange and resident exclude each other"
            ));
        }
        _ => return Err(bad()),
    };
    if parts.len() < 5 {
        return Err(bad());
    }
    let n: Vec<u32> = parts[..5]
        .iter()
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    Ok((pass, d, tc(n[0], n[1], n[2], n[3], n[4]).with(layout)))
}

#[cfg(test)]
mod tests {
    use super::super::{TileConfig, check, parse_override};
    use super::*;

    /// Every row of the table (standard, long, compact) satisfies the layout rules.
    #[test]
    fn every_table_row_is_legal() {
        for spec in KernelSpec::all() {
            let t = TileConfig::Sm80(row(&spec));
            assert_eq!(check(spec.pass, spec.head_dim, &t), Ok(()), "{spec}");
        }
    }

    #[test]
    fn overrides_parse_and_refuse_garbage() {
        let parse = |s: &str| parse_override(s).map(|(p, d, t)| (p, d, *t.sm80()));
        let (pass, d, t) = parse("bwd:64=64,64,4,2,1,resident").unwrap();
        assert_eq!((pass, d), (Pass::Bwd, 64));
        assert_eq!(t, tc(64, 64, 4, 2, 1).with(Resident));
        let (_, _, t) = parse("fwd:256=128,32,8,2,1").unwrap();
        assert!(t.layout == Streamed && t.warps == 8);
        let (_, _, t) = parse("fwd:256=64,64,4,1,1").unwrap();
        assert_eq!(t.stages, 1);
        let (_, _, t) = parse("fwd:256=64,64,4,1,1,exchange").unwrap();
        assert!(t.layout == Exchange && t == FWD_TILES[7].1);
        let (_, _, t) = parse("bwd:128=64,128,8,2,1,exchange").unwrap();
        assert_eq!(t.layout, Exchange);
        let (_, _, t) = parse("bwd:128=64,128,8,2,1,late,exchange").unwrap();
        assert_eq!(t, BWD_LONG_TILES[0].2);
        for bad in [
            "fwd:256",
            "fwd=1,2,3,4,5",
            "fwd:x=1,2,3,4,5",
            "bwdpre:64=64,0,4,1,1",
            "fwd:64=1,2,3,4",
            "fwd:64=1,2,3,4,5,fast",
            "fwd:64=1,2,3,4,5,resident,7",
            "bwd:128=64,128,8,2,1,exchange,exchange",
            "fwd:128=128,32,4,2,1,late",
            "fwd:128=128,32,4,2,1,exchange,late",
            "bwd:128=64,64,4,2,1,resident,exchange",
            "fwd:128=128,32,4,3,1",
            "bwd:64=64,64,4,1,1",
            "fwd:100=128,32,4,2,1",
            "fwd:64=128,64,4,2,1,exchange",
            "fwd:64=64,64,4,1,1,exchange",
            "fwd:256=64,48,4,1,1,exchange",
            "fwd:256=16,64,4,1,1,exchange",
            "bwddq:64=64,64,4,2,2",
            "fwd:64=128,64,0,2,1",
            "fwd:64=128,64,16,2,1",
            "bwd:64=64,64,8,2,1",
            "bwd:128=64,64,4,2,2,exchange",
            "bwd:96=64,64,4,2,1,exchange",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
