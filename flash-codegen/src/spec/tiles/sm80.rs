//! Spec layer: the tile table, every geometric choice of every kernel in one place.

use std::sync::RwLock;

use serde::{Deserialize, Serialize};

use super::Pass;

/// Geometry of one kernel: every choice the kernel body reads, from ONE table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileConfig {
    /// Query rows per CTA.
    pub block_m: u32,
    /// Key/value rows per main-loop iteration.
    pub block_n: u32,
    /// Warps per CTA; each owns `block_m / warps` query rows.
    pub warps: u32,
    /// Shared-memory buffers of the streamed operand (K/V in the forward, Q/dO in the
    /// backward), a power of two: 2 = load block j+1 while computing block j; 1 (forward
    /// only) = one K and one V buffer taking turns (V_j loads during Q K_j^T).
    pub stages: u32,
    /// Backward only: passes over the query blocks. 1 = dV and dK together; 2 = dV first,
    /// then dK and dQ, when both accumulators (d/2 f32 each per thread) don't fit at once.
    pub sweeps: u32,
    /// Operand fragments kept in registers for the whole CTA instead of re-read from
    /// shared memory every block: Q in the forward, K and V in the backward main pass,
    /// Q and dO in the dQ pass. Saves ldmatrix traffic; costs registers.
    pub resident: bool,
    /// Backward main pass only: FA2's warp layouts. The warps tile the key block in
    /// 32-key rows (two m-tiles each) times `warps / (block_n / 32)` groups that split the
    /// query block for S^T and dP^T and the head dim for dV and dK; P^T and dS^T pass
    /// between the layouts through shared memory. Every B fragment then feeds two mma.
    /// The d256 row uses it (64x64, 8 warps, one sweep instead of two: 0.66x -> 0.91x FA2
    /// at 16K) and the d128 row (64x64, 4 warps, two CTAs per SM: 0.85x -> 0.91-1.00x;
    /// docs/performance.md).
    pub exchange: bool,
    /// Backward main pass only: the next query block's copies are issued after the
    /// step's first product (S^T) instead of right after the iteration's barrier, where
    /// they would queue behind the previous block's burst of dQ atomics (the 128-key d128
    /// row: +2-3% at 16K, session 7). Absent in manifests written before it: `false`.
    #[serde(default)]
    pub late_prefetch: bool,
}

/// The forward tile table (sm_80 path). Rows: head_dim -> (block_m, block_n, warps, stages).
/// Each warp owns block_m / warps query rows (one or two m16 tiles): two tiles share every
/// K/V fragment loaded from shared memory, halving ldmatrix traffic per mma; above d160
/// the O accumulator (d/2 f32 per m-tile per thread) only fits with one. d224/d256 take
/// FA2's 64x64 with one K and one V buffer taking turns (stages = 1), measured 5-11% faster
/// than 64x32 double-buffered (docs/performance.md). Shared memory stays <= 96 KiB so
/// every variant also runs on RTX 30/40 (99 KiB per block).
/// d256 splits each key block and the head dim between pairs of warps (`exchange`, see
/// `kernels::fwd_exchange`): 21% fewer shared-memory bytes per mma, +5-9% non-causal and
/// up to +6% causal (session 8, gpu_tune bf16: 16K 329 -> 350 TFLOP/s), for 104.5 KiB
/// of shared memory; GPUs with less per block run [`FWD_COMPACT_TILES`].
#[rustfmt::skip]
pub(super) const FWD_TILES: [(u32, TileConfig); 8] = [
    (32, tc(128, 64, 4, 2, 1).resident()),
    (64, tc(128, 64, 4, 2, 1).resident()),
    (96, tc(128, 64, 4, 2, 1)),
    (128, tc(128, 32, 4, 2, 1)),
    (160, tc(128, 16, 4, 2, 1)),
    (192, tc(64, 32, 4, 2, 1).resident()),
    (224, tc(64, 64, 4, 1, 1)),
    (256, tc(64, 64, 4, 1, 1).exchange()),
];

/// The forward's rows for GPUs whose shared memory per block is below the standard
/// row's ([`super::Tiling::Compact`]; RTX 30/40 allow 99 KiB): the same block_m and
/// warps (so the same grid), 96 KiB.
#[rustfmt::skip]
pub(super) const FWD_COMPACT_TILES: [(u32, TileConfig); 1] = [
    (256, tc(64, 64, 4, 1, 1)),
];

/// Backward main pass (one CTA per key block): block_n keys per CTA (16 per warp; with
/// `exchange`, 32-key row blocks times column groups),
/// block_m queries per inner step; for dQ the warps split into query tiles times column
/// groups of whole 64-column panels (`bwd_atomic_dq::dq_split`). Q, dO, LSE and D are
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
pub(super) const BWD_TILES: [(u32, TileConfig); 8] = [
    (32, tc(64, 64, 4, 2, 1).resident()),
    (64, tc(64, 128, 4, 2, 1)),
    (96, tc(64, 64, 4, 2, 1).resident()),
    (128, tc(64, 64, 4, 2, 1).exchange()),
    (160, tc(64, 64, 4, 2, 2)),
    (192, tc(64, 64, 4, 2, 2)),
    (224, tc(64, 64, 4, 2, 2)),
    (256, tc(64, 64, 8, 2, 1).exchange()),
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
pub(super) const BWD_LONG_TILES: [(u32, u32, TileConfig); 1] = [
    (128, 8192, tc(64, 128, 8, 2, 1).exchange().late_prefetch()),
];

/// Deterministic dQ pass (one CTA per query block, like the forward): one m16 tile per
/// warp with Q and dO fragments resident, or (d128) two m-tiles sharing every K and V
/// fragment (measured up to 4% faster than 64x64 resident).
#[rustfmt::skip]
pub(super) const BWD_DQ_TILES: [(u32, TileConfig); 8] = [
    (32, tc(64, 64, 4, 2, 1).resident()),
    (64, tc(64, 64, 4, 2, 1).resident()),
    (96, tc(64, 64, 4, 2, 1).resident()),
    (128, tc(128, 32, 4, 2, 1)),
    (160, tc(64, 32, 4, 2, 1).resident()),
    (192, tc(64, 32, 4, 2, 1)),
    (224, tc(64, 32, 4, 2, 1)),
    (256, tc(64, 32, 4, 2, 1)),
];

/// Elementwise passes (preprocess, postprocess): block_m rows per CTA, one warp per row.
#[rustfmt::skip]
pub(super) const ELEMENTWISE_TILES: [(u32, TileConfig); 8] = [
    (32, ELEMENTWISE),
    (64, ELEMENTWISE),
    (96, ELEMENTWISE),
    (128, ELEMENTWISE),
    (160, ELEMENTWISE),
    (192, ELEMENTWISE),
    (224, ELEMENTWISE),
    (256, ELEMENTWISE),
];
const ELEMENTWISE: TileConfig = tc(64, 0, 4, 1, 1);

/// A table row: (block_m, block_n, warps, stages, sweeps).
const fn tc(block_m: u32, block_n: u32, warps: u32, stages: u32, sweeps: u32) -> TileConfig {
    TileConfig {
        block_m,
        block_n,
        warps,
        stages,
        sweeps,
        resident: false,
        exchange: false,
        late_prefetch: false,
    }
}

impl TileConfig {
    /// The same tiles with FA2's backward warp layouts (see [`TileConfig::exchange`]).
    pub const fn exchange(self) -> Self {
        TileConfig {
            exchange: true,
            ..self
        }
    }

    /// The same tiles with the late prefetch (see [`TileConfig::late_prefetch`]).
    pub const fn late_prefetch(self) -> Self {
        TileConfig {
            late_prefetch: true,
            ..self
        }
    }

    /// The same tiles with resident operand fragments (see [`TileConfig::resident`]).
    pub const fn resident(self) -> Self {
        TileConfig {
            resident: true,
            ..self
        }
    }

    /// Threads per CTA (`32 * warps`).
    pub fn threads(&self) -> u32 {
        self.warps * 32
    }
}

/// Tile rows that replace table rows, for tuning (see [`set_overrides`]).
static OVERRIDES: RwLock<Vec<(Pass, u32, TileConfig)>> = RwLock::new(Vec::new());

/// Replaces the table rows of the given (pass, head dim) pairs for this process: the
/// generator's `--tile` flag, to measure a configuration without editing the table. The
/// kernels keep their canonical names; the manifest records the tiles they were built
/// with. Tuning only: everything in the process that asks a spec for its tiles (a
/// `FlashAttention` runtime's launch geometry included) sees the override, so never set
/// it in a process that also launches kernels embedded or generated without it.
pub fn set_overrides(rows: Vec<(Pass, u32, TileConfig)>) {
    *OVERRIDES.write().unwrap_or_else(|e| e.into_inner()) = rows;
}

/// The override of (pass, head dim), if one was set.
pub(super) fn overridden(pass: Pass, head_dim: u32) -> Option<TileConfig> {
    let rows = OVERRIDES.read().unwrap_or_else(|e| e.into_inner());
    rows.iter()
        .find(|(p, d, _)| *p == pass && *d == head_dim)
        .map(|(_, _, t)| *t)
}

/// Parses a tile override `PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,FLAG...]` (flags:
/// `resident`, `exchange`, `late`), e.g. `fwd:256=128,32,8,2,1`,
/// `bwd:64=64,64,4,2,1,resident` or `bwd:128=64,128,8,2,1,exchange,late`.
pub fn parse_override(s: &str) -> Result<(Pass, u32, TileConfig), String> {
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
    let flags = parts.get(5..).unwrap_or_default();
    let flag = |name: &str| flags.contains(&name);
    let known = ["resident", "exchange", "late"];
    let distinct = flags
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        == flags.len();
    if parts.len() < 5 || !distinct || flags.iter().any(|f| !known.contains(f)) {
        return Err(bad());
    }
    let n: Vec<u32> = parts[..5]
        .iter()
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let t = tc(n[0], n[1], n[2], n[3], n[4]);
    let t = if flag("resident") { t.resident() } else { t };
    let t = if flag("exchange") { t.exchange() } else { t };
    let t = if flag("late") { t.late_prefetch() } else { t };
    check_override(pass, d, &t).map_err(|why| format!("tile override `{s}`: {why}"))?;
    Ok((pass, d, t))
}

/// The geometry rules every kernel builder relies on (they assert the finer ones).
fn check_override(pass: Pass, d: u32, t: &TileConfig) -> Result<(), String> {
    if !super::HEAD_DIMS.contains(&d) {
        return Err(format!(
            "head dim {d} has no kernel (one of {:?})",
            super::HEAD_DIMS
        ));
    }
    if t.warps == 0 || t.block_m == 0 || t.block_m % 16 != 0 || t.block_n % 16 != 0 {
        return Err("block_m and block_n must be multiples of 16, warps at least 1".into());
    }
    if !t.stages.is_power_of_two() || (t.stages == 1 && pass != Pass::Fwd) {
        return Err("stages must be a power of two (1 only for fwd: K and V take turns)".into());
    }
    if t.exchange && !matches!(pass, Pass::Bwd | Pass::Fwd) {
        return Err("exchange is a fwd and bwd layout".into());
    }
    if t.exchange && pass == Pass::Fwd {
        // the layout's own rules (kernels::fwd_exchange): two m-tiles per warp, G >= 2
        // warps per 32-row block, splitting the keys and whole 64-column panels of d
        let blocks = t.block_m / 32;
        let g = if t.block_m % 32 == 0 && blocks > 0 {
            t.warps / blocks
        } else {
            0
        };
        if g < 2 || t.warps != g * blocks || d % (64 * g) != 0 || t.block_n % (16 * g) != 0 {
            return Err(
                "fwd exchange: block_m a multiple of 32; warps = G x block_m / 32 \
                        with G >= 2; head dim a multiple of 64 G; block_n of 16 G"
                    .into(),
            );
        }
    }
    if t.exchange && t.resident {
        return Err("exchange and resident exclude each other".into());
    }
    if t.late_prefetch && (pass != Pass::Bwd || !t.exchange) {
        return Err("late (prefetch) is a bwd option of the exchange layouts".into());
    }
    if !(1..=2).contains(&t.sweeps) || (t.sweeps == 2 && pass != Pass::Bwd) {
        return Err("sweeps is 1, or 2 for bwd".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Manifests written before `late_prefetch` existed still load (it reads as false).
    #[test]
    fn tiles_without_late_prefetch_deserialize() {
        let t = BWD_LONG_TILES[0].2;
        let mut v = serde_json::to_value(t).unwrap();
        v.as_object_mut().unwrap().remove("late_prefetch");
        let back: TileConfig = serde_json::from_value(v).unwrap();
        assert_eq!(
            back,
            TileConfig {
                late_prefetch: false,
                ..t
            }
        );
    }

    #[test]
    fn overrides_parse_and_refuse_garbage() {
        let (pass, d, t) = parse_override("bwd:64=64,64,4,2,1,resident").unwrap();
        assert_eq!((pass, d), (Pass::Bwd, 64));
        assert_eq!(t, tc(64, 64, 4, 2, 1).resident());
        let (_, _, t) = parse_override("fwd:256=128,32,8,2,1").unwrap();
        assert!(!t.resident && t.warps == 8);
        let (_, _, t) = parse_override("fwd:256=64,64,4,1,1").unwrap();
        assert_eq!(t.stages, 1);
        let (_, _, t) = parse_override("fwd:256=64,64,4,1,1,exchange").unwrap();
        assert!(t.exchange && t == FWD_TILES[7].1);
        let (_, _, t) = parse_override("bwd:128=64,128,8,2,1,exchange").unwrap();
        assert!(t.exchange && !t.resident && !t.late_prefetch);
        let (_, _, t) = parse_override("bwd:128=64,128,8,2,1,exchange,late").unwrap();
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
        ] {
            assert!(parse_override(bad).is_err(), "{bad}");
        }
    }
}
