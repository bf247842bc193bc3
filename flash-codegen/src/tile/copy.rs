//! Tile layer: global -> shared copies of a `[rows][head_dim]` tile with 16-byte `cp.async`.
//!
//! Thread `tid` owns chunk column `tid % cpr` (cpr = chunks per row rounded up to a power
//! of two; lanes past the head dim idle) and rows `tid / cpr + i * step`, step =
//! threads / cpr. So one row, one shared offset per swizzle phase and one global offset
//! serve all of a thread's copies; only the block's global base and valid-row count
//! change per block. Rows past the sequence end and chunks past the problem's head dim
//! are zero-filled (`src-size` 0) with the source clamped to the block base.

use super::smem::{ROW_BYTES, SmemTile};
use crate::ptx::inst::CpSize;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, Pred, Reg};

/// One thread's share of a tile copy.
pub struct TileCopy {
    /// Copies per thread.
    count: u32,
    /// Threads per row (chunks per row, rounded up to a power of two): consecutive lanes.
    cpr: u32,
    /// The thread's chunk column, `tid % cpr`.
    chunk: Reg<B32>,
    /// Rows between a thread's successive copies.
    step: u32,
    row0: Reg<B32>,
    /// Shared offsets of the first `phases` copies; later ones repeat them 8 rows down.
    smem_off: Vec<Reg<B32>>,
    /// Global byte offset of the first copy, and between successive copies.
    gmem_off: Reg<B64>,
    /// Byte offset of the thread's chunk inside a row.
    col_bytes: Reg<B64>,
    gmem_step: Reg<B64>,
    /// The thread's chunk is inside the kernel's head dim (else the lane idles).
    in_kernel: Reg<Pred>,
    /// ... and inside the problem's head dim (else it is zero-filled).
    chunk_ok: Reg<Pred>,
}

impl TileCopy {
    /// Plans the copy of `tile.rows` x `cols` elements (cols = the kernel's head dim, a
    /// multiple of 8). `row_stride` is in elements; `head_dim` bounds the valid chunks.
    pub fn new(
        b: &mut Builder,
        tile: &SmemTile,
        cols: u32,
        threads: u32,
        tid: Reg<B32>,
        row_stride: Reg<B32>,
        head_dim: Reg<B32>,
    ) -> Self {
        let cpr = (cols / 8).next_power_of_two();
        assert!(
            threads % cpr == 0,
            "generator bug: {cpr} chunks per row over {threads} threads"
        );
        let step = threads / cpr;
        assert!(
            tile.rows % step == 0,
            "generator bug: {} rows in steps of {step}",
            tile.rows
        );
        let phases = if step % 8 == 0 { 1 } else { 8 / step };
        let chunk = b.and_b32(tid, cpr - 1);
        let row0 = b.shr_u32(tid, cpr.trailing_zeros());
        let smem_off = (0..phases.min(tile.rows / step))
            .map(|p| {
                let row = b.add_u32(row0, p * step);
                tile.emit_offset(b, row, chunk)
            })
            .collect();
        let col = b.shl_b32(chunk, 3u32);
        let in_kernel = b.setp_u32(Cmp::Lt, col, cols);
        let in_problem = b.setp_u32(Cmp::Lt, col, head_dim);
        let chunk_ok = b.and_pred(in_kernel, in_problem);
        let row_bytes = b.shl_b32(row_stride, 1u32);
        let col_bytes = b.shl_b32(chunk, 4u32);
        let col_bytes = b.cvt_u64_u32(col_bytes);
        let gmem_off = b.mad_wide_u32(row0, row_bytes, col_bytes);
        let gmem_step = b.mul_wide_u32(row_bytes, step);
        TileCopy {
            count: tile.rows / step,
            cpr,
            chunk,
            step,
            row0,
            smem_off,
            gmem_off,
            col_bytes,
            gmem_step,
            in_kernel,
            chunk_ok,
        }
    }

    /// Copies per thread.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Rows between a thread's successive copies.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// Threads sharing a row: `cpr` consecutive lanes (an aligned group of the warp, or
    /// the whole warp and more), the thread's place among them [`TileCopy::chunk`].
    pub fn lanes_per_row(&self) -> u32 {
        self.cpr
    }

    /// The thread's chunk column, `tid % lanes_per_row`.
    pub fn chunk(&self) -> Reg<B32> {
        self.chunk
    }

    /// The byte offset of the thread's chunk inside a row where it is inside the problem's
    /// head dim, else 0 (the chunk is zero-filled; its source then stays in the row).
    pub fn col_bytes_in_row(&self, b: &mut Builder) -> Reg<B64> {
        b.selp_b64(self.col_bytes, 0i64, self.chunk_ok)
    }

    /// Issues copies `k0 .. k0 + n` of the thread into two tiles of one shape (K and V:
    /// `copies[i]` plans tile `i`, at `smem + tile_bases[i]`), copy `k0`'s chunk of tile
    /// `i` at global byte address `srcs[i]` and each next one `step` rows further (the
    /// rows lie in one run of each source). The row and chunk tests and the shared
    /// address are made once for both tiles. Every address must lie inside its source
    /// buffer: rows not below `valid_rows` and chunks past the problem's head dim are
    /// zero-filled from it.
    pub fn issue_run_pair(
        copies: [&TileCopy; 2],
        b: &mut Builder,
        (smem, tile_bases): (Reg<B32>, [u32; 2]),
        mut srcs: [Reg<B64>; 2],
        (k0, n): (u32, u32),
        valid_rows: Reg<B32>,
    ) {
        let c = copies[0];
        assert!(
            c.count == copies[1].count && c.step == copies[1].step,
            "generator bug: a copy pair of two shapes"
        );
        for i in k0..k0 + n {
            if i > k0 {
                for (src, copy) in srcs.iter_mut().zip(copies) {
                    *src = b.add_s64(*src, copy.gmem_step);
                }
            }
            let row = c.row(b, i);
            let (_, size) = c.size(b, row, valid_rows);
            let (dst, below) = c.dst(b, i, smem);
            for (&src, base) in srcs.iter().zip(tile_bases) {
                let at = Addr::Shared(dst, (base + below) as i32);
                b.when(c.in_kernel, false, |b| {
                    b.cp_async(CpSize::B16, at, Addr::Global(src, 0), Some(size.into()))
                });
            }
        }
    }

    /// The tile row of the thread's copy `i` (`row0 + i * step`).
    pub fn row(&self, b: &mut Builder, i: u32) -> Reg<B32> {
        b.add_u32(self.row0, i * self.step)
    }

    /// Issues the copies of the block at global byte address `base` whose first
    /// `valid_rows` rows exist, into the tile at shared address `smem + tile_base`.
    pub fn issue(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        tile_base: u32,
        base: Reg<B64>,
        valid_rows: Reg<B32>,
    ) {
        let mut src = b.add_s64(base, self.gmem_off);
        for i in 0..self.count {
            if i > 0 {
                src = b.add_s64(src, self.gmem_step);
            }
            let row = self.row(b, i);
            self.copy(b, i, (smem, tile_base), (src, base), (row, valid_rows));
        }
    }

    /// Issues the copies of a tile whose rows sit anywhere: `row_addr(b, row)` gives the
    /// global byte address of tile row `row` (called once per copy, for rows below
    /// `valid_rows` and past them alike; only the first are read). Rows past
    /// `valid_rows` are zero-filled with the source clamped to `fallback`.
    pub fn issue_gathered(
        &self,
        b: &mut Builder,
        (smem, tile_base): (Reg<B32>, u32),
        fallback: Reg<B64>,
        valid_rows: Reg<B32>,
        mut row_addr: impl FnMut(&mut Builder, Reg<B32>) -> Reg<B64>,
    ) {
        for i in 0..self.count {
            let row = self.row(b, i);
            let src = row_addr(b, row);
            let src = b.add_s64(src, self.col_bytes);
            self.copy(b, i, (smem, tile_base), (src, fallback), (row, valid_rows));
        }
    }

    /// The thread's copy `i` of tile row `row` from global byte address `src` (its
    /// chunk's): 16 bytes, or zero-filled from `fallback` where the row is not below
    /// `valid_rows` or the chunk is past the problem's head dim.
    fn copy(
        &self,
        b: &mut Builder,
        i: u32,
        (smem, tile_base): (Reg<B32>, u32),
        (src, fallback): (Reg<B64>, Reg<B64>),
        (row, valid_rows): (Reg<B32>, Reg<B32>),
    ) {
        let (ok, size) = self.size(b, row, valid_rows);
        let from = b.selp_b64(src, fallback, ok);
        let (dst, below) = self.dst(b, i, smem);
        let dst = Addr::Shared(dst, (tile_base + below) as i32);
        b.when(self.in_kernel, false, |b| {
            b.cp_async(CpSize::B16, dst, Addr::Global(from, 0), Some(size.into()))
        });
    }

    /// Whether the thread's chunk of tile row `row` is copied (the row below
    /// `valid_rows`, the chunk inside the problem's head dim), and the copy's source size
    /// (16 bytes, or 0: zero-filled).
    fn size(&self, b: &mut Builder, row: Reg<B32>, valid_rows: Reg<B32>) -> (Reg<Pred>, Reg<B32>) {
        let row_ok = b.setp_s32(Cmp::Lt, row, valid_rows);
        let ok = b.and_pred(row_ok, self.chunk_ok);
        (ok, b.selp_b32(16u32, 0u32, ok))
    }

    /// The shared address of the thread's copy `i` in a tile at `smem + tile_base`, as a
    /// register (`smem` plus the copy's swizzled offset) and the constant to add with the
    /// tile base: one register for every tile of the plan's shape.
    fn dst(&self, b: &mut Builder, i: u32, smem: Reg<B32>) -> (Reg<B32>, u32) {
        let phases = self.smem_off.len() as u32;
        let dst = b.add_u32(smem, self.smem_off[(i % phases) as usize]);
        (dst, (i / phases) * phases * self.step * ROW_BYTES)
    }
}
