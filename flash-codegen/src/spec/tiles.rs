//! Spec layer: the tile table, every geometric choice of every kernel in one place.

use serde::{Deserialize, Serialize};

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
    /// backward): 2 = load block j+1 while computing block j.
    pub stages: u32,
    /// Backward only: passes over the query blocks. 1 = dV and dK together; 2 = dV first,
    /// then dK and dQ, when both accumulators (d/2 f32 each per thread) don't fit at once.
    pub sweeps: u32,
}

/// The forward tile table (sm_80 path). Rows: head_dim -> (block_m, block_n, warps, stages).
/// Each warp owns block_m / warps query rows (one or two m16 tiles): two tiles share every
/// K/V fragment loaded from shared memory, halving ldmatrix traffic per mma; above d160
/// the O accumulator (d/2 f32 per m-tile per thread) only fits with one. Shared memory
/// stays <= 96 KiB so every variant also runs on RTX 30/40 (99 KiB per block).
#[rustfmt::skip]
pub(super) const FWD_TILES: [(u32, TileConfig); 8] = [
    (32, tc(128, 64, 4, 2, 1)),
    (64, tc(128, 64, 4, 2, 1)),
    (96, tc(128, 64, 4, 2, 1)),
    (128, tc(128, 32, 4, 2, 1)),
    (160, tc(128, 16, 4, 2, 1)),
    (192, tc(64, 32, 4, 2, 1)),
    (224, tc(64, 32, 4, 2, 1)),
    (256, tc(64, 32, 4, 2, 1)),
];

/// Backward main pass (one CTA per key block): block_n keys per CTA (16 per warp),
/// block_m queries per inner step; for dQ the warps split into block_m / 16 query tiles
/// times column groups of whole 64-column panels (d128: 8 warps, 128 keys, half the dQ
/// atomics of 64-key blocks). Q, dO, LSE and D are double buffered; K, V and the dS^T
/// tile stay resident. d >= 160 takes two sweeps (dV, then dK and dQ).
#[rustfmt::skip]
pub(super) const BWD_TILES: [(u32, TileConfig); 8] = [
    (32, tc(64, 64, 4, 2, 1)),
    (64, tc(64, 64, 4, 2, 1)),
    (96, tc(64, 64, 4, 2, 1)),
    (128, tc(64, 128, 8, 2, 1)),
    (160, tc(64, 64, 4, 2, 2)),
    (192, tc(64, 64, 4, 2, 2)),
    (224, tc(64, 64, 4, 2, 2)),
    (256, tc(64, 64, 4, 2, 2)),
];

/// Deterministic dQ pass (one CTA per query block, like the forward; one m16 tile per warp).
#[rustfmt::skip]
pub(super) const BWD_DQ_TILES: [(u32, TileConfig); 8] = [
    (32, tc(64, 64, 4, 2, 1)),
    (64, tc(64, 64, 4, 2, 1)),
    (96, tc(64, 64, 4, 2, 1)),
    (128, tc(64, 64, 4, 2, 1)),
    (160, tc(64, 32, 4, 2, 1)),
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
    }
}

impl TileConfig {
    /// Threads per CTA (`32 * warps`).
    pub fn threads(&self) -> u32 {
        self.warps * 32
    }
}
