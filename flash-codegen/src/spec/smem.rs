//! Spec layer: where a kernel's shared-memory regions start, computed once from its tile
//! row. The kernels place their tiles at these offsets; the launch asks for `bytes`.

use super::KernelSpec;
use super::tiles::TileConfig;

/// A `[rows][cols]` tile of 2-byte elements (cols a multiple of 64) at byte `base` of the
/// dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileRegion {
    /// Byte offset from the start of dynamic shared memory.
    pub base: u32,
    /// Rows.
    pub rows: u32,
    /// Columns (elements), a multiple of 64.
    pub cols: u32,
}

impl TileRegion {
    /// Bytes the tile occupies.
    pub fn bytes(&self) -> u32 {
        self.rows * self.cols * 2
    }
    /// The first byte past the tile.
    pub fn end(&self) -> u32 {
        self.base + self.bytes()
    }
}

/// Two operands streamed block by block: `stages` tiles `[rows][cols]` of operand 0,
/// then `stages` of operand 1, then `vectors` per-row f32 vectors of `stages` x `rows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamRegion {
    /// Byte offset of operand 0's stage 0.
    pub base: u32,
    /// Rows per block.
    pub rows: u32,
    /// Columns (elements) per row, a multiple of 64.
    pub cols: u32,
    /// Buffers per operand.
    pub stages: u32,
    /// Per-row f32 vectors streamed with the tiles.
    pub vectors: u32,
}

impl StreamRegion {
    /// Bytes of one stage of one operand.
    pub fn stage_bytes(&self) -> u32 {
        self.rows * self.cols * 2
    }
    /// Stage 0 of operand `i` (0 or 1); stage s sits `s * stage_bytes` further.
    pub fn tile(&self, i: u32) -> TileRegion {
        TileRegion {
            base: self.base + i * self.stages * self.stage_bytes(),
            rows: self.rows,
            cols: self.cols,
        }
    }
    /// Byte offset of stage 0 of vector `i`; stage s sits `4 s rows` further.
    pub fn vector(&self, i: u32) -> u32 {
        self.tile(2).base + i * self.stages * self.rows * 4
    }
    /// Bytes of every buffer.
    pub fn bytes(&self) -> u32 {
        self.vector(self.vectors) - self.base
    }
}

/// A kernel's dynamic shared memory, region by region, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmemLayout {
    /// Tiles loaded once per CTA: Q (forward), K and V (backward main pass), Q and dO
    /// (deterministic dQ pass).
    pub fixed: Vec<TileRegion>,
    /// The streamed operands: K and V (forward, dQ pass), Q and dO with the LSE and D
    /// vectors (backward main pass).
    pub stream: Option<StreamRegion>,
    /// Tiles the warps exchange: P (forward exchange layout); dS^T, then a second dS^T or
    /// (exchange layout) P^T (backward main pass); the warps' f32 sums of a row
    /// (fwdcombine).
    pub exchange: Vec<TileRegion>,
    /// The forward exchange layout's row statistics, f32 `[groups][block_m]`.
    pub stats: Option<u32>,
    /// Total bytes: the launch's dynamic shared memory.
    pub bytes: u32,
}

impl SmemLayout {
    /// The layout of `spec` built on `tiles`.
    pub fn new(spec: &KernelSpec, tiles: &TileConfig) -> Self {
        match tiles {
            TileConfig::Sm80(t) => super::tiles::sm80::smem::layout(spec, t),
        }
    }
}
