//! Tile layer: global -> shared copies of a [rows][head_dim] tile with 16-byte `cp.async`.
//!
//! Thread `tid` moves chunks `tid + i * threads` (row = idx / chunks_per_row). Each
//! thread's (row, chunk, smem offset) is computed once; per block only the global base
//! and the valid-row bound change. Rows past the sequence end and chunks past the
//! problem's head dim are zero-filled (`src-size` 0) with the source clamped to the base.

use super::smem::SmemTile;
use crate::ptx::inst::CpSize;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, Pred, Reg};

/// One thread's share of a tile copy.
pub struct TileCopy {
    rows: Vec<Reg<B32>>,
    smem_off: Vec<Reg<B32>>,
    gmem_off: Vec<Reg<B64>>,
    chunk_ok: Vec<Reg<Pred>>,
}

impl TileCopy {
    /// Plans the copy of `rows` x `cols` elements (cols = the kernel's head dim, a multiple
    /// of 8) into `tile`. `row_stride` is in elements; `head_dim` bounds the valid chunks.
    pub fn new(
        b: &mut Builder,
        tile: &SmemTile,
        cols: u32,
        threads: u32,
        tid: Reg<B32>,
        row_stride: Reg<B32>,
        head_dim: Reg<B32>,
    ) -> Self {
        let per_row = cols / 8;
        let total = tile.rows * per_row;
        assert!(total % threads == 0, "generator bug: {total} chunks over {threads} threads");
        let row_bytes = b.shl_b32(row_stride, 1);
        let mut plan = TileCopy { rows: vec![], smem_off: vec![], gmem_off: vec![], chunk_ok: vec![] };
        for i in 0..total / threads {
            let idx = b.add_u32(tid, i * threads);
            let row = b.div_u32(idx, per_row);
            let chunk = b.rem_u32(idx, per_row);
            plan.smem_off.push(tile.emit_offset(b, row, chunk));
            let col_bytes = b.shl_b32(chunk, 4);
            let col64 = b.cvt_u64_u32(col_bytes);
            plan.gmem_off.push(b.mad_wide_u32(row, row_bytes, col64));
            let col = b.shl_b32(chunk, 3);
            plan.chunk_ok.push(b.setp_u32(Cmp::Lt, col, head_dim));
            plan.rows.push(row);
        }
        plan
    }

    /// Issues the copies of the block at global byte address `base` whose first
    /// `valid_rows` rows exist, into the tile at shared address `smem + tile_base`.
    pub fn issue(&self, b: &mut Builder, smem: Reg<B32>, tile_base: u32, base: Reg<B64>, valid_rows: Reg<B32>) {
        for i in 0..self.rows.len() {
            let row_ok = b.setp_s32(Cmp::Lt, self.rows[i], valid_rows);
            let ok = b.and_pred(row_ok, self.chunk_ok[i]);
            let size = b.selp_b32(16u32, 0u32, ok);
            let off = b.selp_b64(self.gmem_off[i], 0i64, ok);
            let src = b.add_s64(base, off);
            let dst = b.add_u32(smem, self.smem_off[i]);
            b.cp_async(CpSize::B16, Addr::Shared(dst, tile_base as i32), Addr::Global(src, 0), Some(size.into()));
        }
    }
}
