//! Kernel layer: a warp's stores of its accumulators: to a swizzled shared tile (dS^T,
//! P^T, or staging), and rows to global memory (directly, or staged through shared memory
//! for 16-byte coalesced stores).

use super::warp::Warp;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, HalfFmt, LdCache, Pred, Reg, Space, Ty};
use crate::tile::acc::AccTile;
use crate::tile::smem::{ROW_BYTES, SmemTile};

/// Where the n-tiles of [`Warp::store_tile`] start: a compile-time n-tile, or a run-time
/// chunk.
#[derive(Clone, Copy)]
pub enum Cols {
    /// N-tile `nt0` (columns `8 nt0..`).
    Fixed(usize),
    /// The 8-column chunk in a register (columns `8 chunk..`).
    At(Reg<B32>),
}

impl Warp {
    /// Writes accumulator tiles (this thread's fragments, converted to `fmt`; rows = the
    /// warp's rows, columns from `cols`) into `tile` at shared address `smem`: dS^T, P^T,
    /// or an output staged for [`Warp::store_rows_staged`]. Eight rows at one logical
    /// chunk sit in eight distinct bank groups, so the 4-byte stores are conflict-free.
    pub fn store_tile(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTile,
        smem: Reg<B32>,
        tile: &SmemTile,
        cols: Cols,
    ) {
        // thread row r is its row 0 plus row_offset(r) (a multiple of 8), with the same
        // swizzle phase: one address per chunk serves every row through the immediate offset
        let col_bytes = b.shl_b32(self.t2, 1u32);
        for nt in 0..acc.n_tiles() {
            let chunk = match cols {
                Cols::Fixed(nt0) => b.mov((nt0 + nt) as u32),
                Cols::At(c) => b.add_u32(c, nt as u32),
            };
            let off = tile.emit_offset(b, self.rows[0], chunk);
            let off = b.add_u32(off, col_bytes);
            let addr = b.add_u32(smem, off);
            for r in 0..acc.rows() {
                let [lo, hi] = acc.pair(r, nt);
                let word = b.pack(fmt, lo, hi);
                let imm = tile.base + AccTile::row_offset(r) * ROW_BYTES;
                b.st(
                    Space::Shared,
                    Ty::B32,
                    Addr::Shared(addr, imm as i32),
                    &[word],
                );
            }
        }
    }

    /// Stores the warp's accumulator rows like [`Warp::store_rows`], through the warp's
    /// own rows of `tile` (at shared address `smem`; nothing else may read or write them
    /// now): the fragments go to shared memory, then every lane writes whole 16-byte
    /// chunks, a row's chunks on consecutive lanes, so each store fills 32-byte sectors
    /// instead of writing 4 bytes per lane across eight rows. No CTA barrier: the warp
    /// only reads back what it wrote (`bar.warp.sync` orders it), so every warp must own
    /// its rows alone (the [`Warp::new`] layout, as in the forward), or, with `cols` a
    /// column offset, its columns of rows it shares (the forward's exchange layout, whose
    /// caller orders the other warps' reads of those rows before the call with a barrier).
    /// The fragments go in through [`Warp::store_tile`]; the read-back runs as a run-time
    /// loop over groups of 8 rows.
    #[allow(clippy::too_many_arguments)]
    pub fn store_rows_staged(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTile,
        (tile, smem, cols): (&SmemTile, Reg<B32>, Cols),
        base: Reg<B64>,
        row_stride: Reg<B32>,
        head_dim: Reg<B32>,
        valid_rows: Reg<B32>,
    ) {
        let chunks = acc.n_tiles() as u32; // one 16-byte chunk per 8-column n-tile
        // 4 to 32 chunks (d32..d256): a row's chunks fit one warp store, and at least 4
        // lanes per row keep a store's rows inside its group of 8 (lane_row ^ r0 below)
        assert!(
            (4..=32).contains(&chunks),
            "generator bug: {chunks} chunks per row"
        );
        let panel_bytes = tile.rows * ROW_BYTES;
        self.store_tile(b, fmt, acc, smem, tile, cols);
        // the warp's rows start at a multiple of 16, so every row of the thread has the
        // swizzle phase g = row & 7, and `lane` and the warp's first row follow from its
        // first row and t2 (live here anyway; keeping `lane` and `warp_row` alive through
        // the main loop for this would cost registers)
        let g = b.and_b32(self.rows[0], 7u32);
        let warp_row = b.sub_u32(self.rows[0], g);
        b.bar_warp_sync();
        // lanes per row: the row's chunks rounded up to a power of two, at most 32
        let per_row = chunks.next_power_of_two().min(32);
        let rows_per_store = 32 / per_row;
        let t = b.shr_u32(self.t2, 1u32);
        let lane = b.mad_lo_u32(g, 4u32, t);
        let own = b.and_b32(lane, per_row - 1); // the lane's chunk of the warp's columns
        let chunk = match cols {
            Cols::Fixed(0) => own,
            Cols::Fixed(c) => b.add_u32(own, c as u32),
            Cols::At(c) => b.add_u32(own, c),
        };
        let lane_row = b.shr_u32(lane, per_row.trailing_zeros());
        let first_row = b.add_u32(warp_row, lane_row);
        let rows_left = b.sub_s32(valid_rows, first_row);
        let row_bytes = b.shl_b32(row_stride, 1u32);
        let row_step = b.mul_wide_u32(row_bytes, rows_per_store);
        let row0 = b.mul_wide_u32(first_row, row_bytes);
        let row0 = b.add_s64(base, row0);
        let col = b.shl_b32(chunk, 3u32);
        let in_kernel = b.setp_u32(Cmp::Lt, own, chunks);
        let in_problem = b.setp_u32(Cmp::Lt, col, head_dim);
        let chunk_ok = b.and_pred(in_kernel, in_problem);
        // shared: the chunk's panel at the lane's first row; the swizzle phase of row
        // first_row + r0 is lane_row ^ (r0 & 7) (lane_row < rows_per_store | r0)
        let panel = b.shr_u32(chunk, 3u32);
        let from = b.mad_lo_u32(panel, panel_bytes, smem);
        let from = b.mad_lo_u32(first_row, ROW_BYTES, from);
        let c = b.and_b32(chunk, 7u32);
        let c = b.xor_b32(c, lane_row);
        let col_bytes = b.shl_b32(chunk, 4u32);
        let col_bytes = b.cvt_u64_u32(col_bytes);
        let to = b.add_s64(row0, col_bytes);
        // a run-time loop over groups of 8 rows (the swizzle phases of a group are
        // compile-time): fully unrolled, ptxas computes every row's global address up
        // front, next to the live O accumulator, and spills at d160
        let step8 = b.mul_wide_u32(row_bytes, 8u32);
        let groups = 16 * self.m_tiles as u32 / 8;
        let group = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, group, groups);
        b.loop_exit_unless(&lp, more);
        let mut at = to;
        for r0 in (0..8).step_by(rows_per_store as usize) {
            if r0 > 0 {
                at = b.add_s64(at, row_step);
            }
            let row_ok = b.setp_s32(Cmp::Gt, rows_left, r0 as i32);
            let ok = b.and_pred(row_ok, chunk_ok);
            let sw = b.xor_b32(c, r0);
            let sw = b.shl_b32(sw, 4u32);
            let addr = b.add_u32(from, sw);
            let imm = tile.base + r0 * ROW_BYTES;
            b.when(ok, false, |b| {
                let v: [Reg<B32>; 4] = b.ld(
                    Space::Shared,
                    LdCache::Default,
                    Ty::B32,
                    Addr::Shared(addr, imm as i32),
                );
                b.st(Space::Global, Ty::B32, Addr::Global(at, 0), &v);
            });
        }
        let next = b.add_u32(group, 1u32);
        b.assign(group, next);
        let next = b.add_u32(from, 8 * ROW_BYTES);
        b.assign(from, next);
        let next = b.sub_s32(rows_left, 8i32);
        b.assign(rows_left, next);
        let next = b.add_s64(to, step8);
        b.assign(to, next);
        b.loop_end(lp);
    }

    /// Stores accumulator rows (converted to `fmt`) to `base + row * row_stride` for rows
    /// below `valid_rows` and head-dim columns below `head_dim`.
    #[allow(clippy::too_many_arguments)]
    pub fn store_rows(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTile,
        base: Reg<B64>,
        row_stride: Reg<B32>,
        head_dim: Reg<B32>,
        valid_rows: Reg<B32>,
    ) {
        let row_bytes = b.shl_b32(row_stride, 1u32);
        let col_bytes = b.shl_b32(self.t2, 1u32);
        let at = (base, row_bytes, col_bytes);
        self.store_pairs(
            b,
            acc,
            at,
            (head_dim, valid_rows),
            |b, ok, addr, [lo, hi], dt| {
                let packed = b.pack(fmt, lo, hi);
                b.when(ok, false, |b| {
                    b.st(
                        Space::Global,
                        Ty::B32,
                        Addr::Global(addr, 16 * dt as i32),
                        &[packed],
                    )
                });
            },
        );
    }

    /// Stores accumulator rows as f32 to `base + row * row_bytes` for rows below
    /// `valid_rows` and columns below `cols` (a partial sum's tile: 8-byte pairs).
    pub fn store_rows_f32(
        &self,
        b: &mut Builder,
        acc: &AccTile,
        (base, row_bytes): (Reg<B64>, Reg<B32>),
        cols: Reg<B32>,
        valid_rows: Reg<B32>,
    ) {
        let col_bytes = b.shl_b32(self.t2, 2u32);
        let at = (base, row_bytes, col_bytes);
        self.store_pairs(b, acc, at, (cols, valid_rows), |b, ok, addr, pair, dt| {
            b.when(ok, false, |b| {
                b.st(
                    Space::Global,
                    Ty::F32,
                    Addr::Global(addr, 32 * dt as i32),
                    &pair,
                )
            });
        });
    }

    /// The rows of [`Warp::store_rows`] and [`Warp::store_rows_f32`]: for each of the
    /// thread's accumulator rows and n-tiles, `st(b, ok, addr, pair, dt)` with the row's
    /// address `base + row * row_bytes + col_bytes` and whether the row is below
    /// `valid_rows` and the n-tile's columns below `cols`.
    fn store_pairs(
        &self,
        b: &mut Builder,
        acc: &AccTile,
        (base, row_bytes, col_bytes): (Reg<B64>, Reg<B32>, Reg<B32>),
        (cols, valid_rows): (Reg<B32>, Reg<B32>),
        mut st: impl FnMut(&mut Builder, Reg<Pred>, Reg<B64>, [Reg<F32>; 2], usize),
    ) {
        let col_bytes = b.cvt_u64_u32(col_bytes);
        // thread row r is its row 0 plus row_offset(r), computed here rather than kept
        // live through the caller's loops
        for r in 0..acc.rows() {
            let row = match r {
                0 => self.rows[0],
                _ => b.add_u32(self.rows[0], AccTile::row_offset(r)),
            };
            let row_ok = b.setp_s32(Cmp::Lt, row, valid_rows);
            let addr = b.mad_wide_u32(row, row_bytes, col_bytes);
            let addr = b.add_s64(base, addr);
            for dt in 0..acc.n_tiles() {
                let col_ok = b.setp_u32(Cmp::Lt, 8 * dt as u32, cols);
                let ok = b.and_pred(row_ok, col_ok);
                st(b, ok, addr, acc.pair(r, dt), dt);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tile::smem::{ROW_BYTES, SmemTile};

    /// `store_tile` addresses row r of a thread as its row 0 plus `8 r` rows, with one
    /// swizzle phase: true for every first row `warp_row + g` (warp_row a multiple of 16).
    #[test]
    fn thread_rows_share_the_chunk_address() {
        let tile = SmemTile::new(0, 128, 256);
        for warp_row in (0..128).step_by(32) {
            for g in 0..8 {
                for r in 0..4 {
                    for chunk in 0..32 {
                        let row0 = warp_row + g;
                        assert_eq!(
                            tile.offset(row0 + 8 * r, chunk),
                            tile.offset(row0, chunk) + 8 * r * ROW_BYTES,
                            "row0 {row0} r {r} chunk {chunk}"
                        );
                    }
                }
            }
        }
    }

    /// `store_rows_staged` reads row `first_row + 8 group + r0` at
    /// `panel * panel_bytes + (first_row + 8 group + r0) * 128 + (((chunk & 7) ^ lane_row ^ r0) << 4)`
    /// for each lane layout (lanes per row 4..32); the tile's own swizzle must agree.
    #[test]
    fn staged_reads_follow_the_swizzle() {
        for (rows, cols) in [(64, 256), (128, 128), (128, 64), (128, 192)] {
            let tile = SmemTile::new(0, rows, cols);
            let chunks = cols / 8;
            for per_row in [4u32, 8, 16, 32] {
                let rows_per_store = 32 / per_row;
                for warp_row in (0..rows).step_by(16) {
                    for lane in 0..32 {
                        let (chunk, lane_row) = (lane % per_row, lane / per_row);
                        if chunk >= chunks {
                            continue;
                        }
                        let first_row = warp_row + lane_row;
                        for group in 0..(rows - warp_row).min(16) / 8 {
                            for r0 in (0..8).step_by(rows_per_store as usize) {
                                let row = first_row + 8 * group + r0;
                                let panel = chunk / 8;
                                let sw = ((chunk % 8) ^ lane_row ^ r0) << 4;
                                let at = panel * rows * ROW_BYTES + row * ROW_BYTES + sw;
                                assert_eq!(tile.offset(row, chunk), at, "row {row} chunk {chunk}");
                            }
                        }
                    }
                }
            }
        }
    }
}
