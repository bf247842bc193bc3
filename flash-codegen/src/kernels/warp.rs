//! Kernel layer: a warp's share of a block: its m16 row tiles, fragment coordinates,
//! per-lane `ldmatrix` addressing, and the two tile products of FA2 (A B^T from shared
//! memory, and register-A times B from shared memory), plus row stores.

use super::softmax::{AccTiles, zeros};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, HalfFmt, LdCache, Reg, Space, Special, Ty};
use crate::tile::frag::{LDM_A, LDM_B_KN_TRANS, LDM_B_NK, c_frag};
use crate::tile::smem::{LdmLanes, ROW_BYTES, SmemTile};

/// A-operand fragments of a warp's rows held in registers, `[kk][mt]` (contraction step,
/// m-tile).
pub type AFrags = Vec<Vec<[Reg<B32>; 4]>>;

/// Where the A operand of [`Warp::mma_a_bt`] comes from.
pub enum AOperand<'a> {
    /// A tile at a shared address, read fragment by fragment as the product goes.
    Smem(&'a SmemTile, Reg<B32>),
    /// Fragments loaded before (by [`Warp::load_a`]) and kept in registers.
    Regs(AFrags),
}

/// Where the n-tiles of [`Warp::store_tile`] start: a compile-time n-tile, or a run-time
/// chunk.
#[derive(Clone, Copy)]
pub enum Cols {
    /// N-tile `nt0` (columns `8 nt0..`).
    Fixed(usize),
    /// The 8-column chunk in a register (columns `8 chunk..`).
    At(Reg<B32>),
}

/// A warp owning `16 * m_tiles` consecutive rows of a block.
pub struct Warp {
    /// `%tid.x`.
    pub tid: Reg<B32>,
    /// Lane id (`tid & 31`).
    pub lane: Reg<B32>,
    /// Warp index in the CTA (`tid >> 5`).
    pub warp: Reg<B32>,
    /// m16 row tiles the warp owns.
    pub m_tiles: usize,
    /// First row of the warp inside the block (`16 * m_tiles * warp`).
    pub warp_row: Reg<B32>,
    /// The thread's rows inside the block (`2 * mt + h` -> row g + 8h of m-tile mt).
    pub rows: Vec<Reg<B32>>,
    /// `2 * (lane & 3)`: the first accumulator column of the thread.
    pub t2: Reg<B32>,
    /// ldmatrix addressing of A operands (`[m][k]` tiles).
    pub a_lanes: LdmLanes,
    /// ldmatrix addressing of B operands stored `[n][k]`.
    pub bt_lanes: LdmLanes,
    /// ldmatrix.trans addressing of B operands stored `[k][n]`.
    pub b_lanes: LdmLanes,
}

impl Warp {
    /// Lane coordinates, the warp's rows and its ldmatrix lane offsets.
    pub fn new(b: &mut Builder, m_tiles: usize) -> Self {
        Self::with_row_blocks(b, m_tiles, None)
    }

    /// Like [`Warp::new`], but with `Some(n)` the warps tile only `n` row blocks and
    /// repeat: warp w owns row block `w % n` (its column group is `w / n`).
    pub fn with_row_blocks(b: &mut Builder, m_tiles: usize, blocks: Option<u32>) -> Self {
        let tid = b.special(Special::TidX);
        let lane = b.and_b32(tid, 31u32);
        let warp = b.shr_u32(tid, 5u32);
        let t2 = c_frag(0).col.emit(b, lane);
        let g = c_frag(0).row.emit(b, lane);
        let block = match blocks {
            Some(n) => b.rem_u32(warp, n),
            None => warp,
        };
        let warp_row = b.mul_lo_u32(block, 16 * m_tiles as u32);
        let rows = (0..m_tiles as u32)
            .flat_map(|mt| [0u32, 8].map(|h| 16 * mt + h))
            .map(|off| {
                let r = b.add_u32(warp_row, g);
                b.add_u32(r, off)
            })
            .collect();
        let a_lanes = LdmLanes::new(b, &LDM_A, lane);
        let bt_lanes = LdmLanes::new(b, &LDM_B_NK, lane);
        let b_lanes = LdmLanes::new(b, &LDM_B_KN_TRANS, lane);
        Warp {
            tid,
            lane,
            warp,
            m_tiles,
            warp_row,
            rows,
            t2,
            a_lanes,
            bt_lanes,
            b_lanes,
        }
    }

    /// Fresh zero accumulators of `n_cols` columns for the warp's m-tiles.
    pub fn acc_zeros(&self, b: &mut Builder, n_cols: u32) -> AccTiles {
        zeros(b, self.m_tiles, (n_cols / 8) as usize)
    }

    /// Loads the A fragments of the warp's rows of `a` (a tile at shared address `smem`)
    /// over `k_dim` contraction columns, to keep them in registers (`[kk][mt]`).
    pub fn load_a(&self, b: &mut Builder, a: (&SmemTile, Reg<B32>), k_dim: u32) -> AFrags {
        let wr = b.mul_lo_u32(self.warp_row, ROW_BYTES);
        let a_base = b.add_u32(a.1, wr);
        (0..k_dim / 16)
            .map(|kk| self.load_a_step(b, a.0, a_base, kk))
            .collect()
    }

    /// The A operands of `tiles` (at shared address `smem`) for [`Warp::mma_a_bt`]: with
    /// `resident`, waits for every cp.async group but the last committed one, syncs the
    /// CTA and loads their fragments into registers (once per call: the backward calls it
    /// once per query head); otherwise they are read from shared memory at each product.
    pub fn a_operands<'a, const N: usize>(
        &self,
        b: &mut Builder,
        resident: bool,
        tiles: [&'a SmemTile; N],
        smem: Reg<B32>,
        k_dim: u32,
    ) -> [AOperand<'a>; N] {
        if !resident {
            return tiles.map(|t| AOperand::Smem(t, smem));
        }
        b.comment("-- operand fragments to registers --");
        b.cp_async_wait(1);
        b.bar_sync();
        tiles.map(|t| AOperand::Regs(self.load_a(b, (t, smem), k_dim)))
    }

    /// The A fragments of contraction step `kk` (one per m-tile).
    fn load_a_step(
        &self,
        b: &mut Builder,
        tile: &SmemTile,
        a_base: Reg<B32>,
        kk: u32,
    ) -> Vec<[Reg<B32>; 4]> {
        (0..self.m_tiles)
            .map(|mt| {
                let addr = self.a_lanes.addr(b, a_base, tile, 16 * mt as u32, 2 * kk);
                b.ldmatrix::<4>(false, addr)
            })
            .collect()
    }

    /// `acc[mt][nt] += A[warp rows][k] * B[n][k]^T`: A from shared memory (loaded step by
    /// step) or from fragments already in registers, B from `bt` (a tile at a shared
    /// address: K in Q K^T, V in dO V^T); contraction over `k_dim` columns.
    pub fn mma_a_bt(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTiles,
        a: &AOperand,
        bt: (&SmemTile, Reg<B32>),
        k_dim: u32,
    ) {
        let n_tiles = acc[0].len() as u32;
        assert!(
            n_tiles % 2 == 0,
            "generator bug: odd n-tile count {n_tiles}"
        );
        let a_base = match *a {
            AOperand::Smem(_, smem) => {
                let wr = b.mul_lo_u32(self.warp_row, ROW_BYTES);
                Some(b.add_u32(smem, wr))
            }
            AOperand::Regs(_) => None,
        };
        for kk in 0..k_dim / 16 {
            let af = match (a, a_base) {
                (&AOperand::Smem(tile, _), Some(base)) => self.load_a_step(b, tile, base, kk),
                (AOperand::Regs(frags), _) => frags[kk as usize].clone(),
                _ => unreachable!("a_base is set for shared-memory operands"),
            };
            for np in 0..n_tiles / 2 {
                let addr = self.bt_lanes.addr(b, bt.1, bt.0, 16 * np, 2 * kk);
                let bf = b.ldmatrix::<4>(false, addr);
                for (mt, a_mt) in af.iter().enumerate() {
                    b.mma(fmt, acc[mt][2 * np as usize], *a_mt, [bf[0], bf[1]]);
                    b.mma(fmt, acc[mt][2 * np as usize + 1], *a_mt, [bf[2], bf[3]]);
                }
            }
        }
    }

    /// `acc[mt][nt] += A[mt] * B[k][n]` for each m-tile: A fragments from registers
    /// (`a[mt][kk]`, one per k16 step, e.g. P or dS converted in place), B from `b_tile`
    /// `[k][n]` at `b_smem` via `ldmatrix.trans`, each B fragment loaded once for all
    /// m-tiles; the product's columns are those of `b_tile` from 8-column chunk `chunk0`
    /// (even) on.
    pub fn mma_a_b(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &[Vec<[Reg<F32>; 4]>],
        a: &[Vec<[Reg<B32>; 4]>],
        b_tile: (&SmemTile, Reg<B32>),
        chunk0: u32,
    ) {
        assert_eq!(acc.len(), a.len(), "generator bug: m-tiles of A and C");
        assert!(acc[0].len() % 2 == 0, "generator bug: odd n-tile count");
        for kk in 0..a[0].len() {
            for np in 0..acc[0].len() as u32 / 2 {
                let addr =
                    self.b_lanes
                        .addr(b, b_tile.1, b_tile.0, 16 * kk as u32, chunk0 + 2 * np);
                let bf = b.ldmatrix::<4>(true, addr);
                for (acc_mt, a_mt) in acc.iter().zip(a) {
                    b.mma(fmt, acc_mt[2 * np as usize], a_mt[kk], [bf[0], bf[1]]);
                    b.mma(fmt, acc_mt[2 * np as usize + 1], a_mt[kk], [bf[2], bf[3]]);
                }
            }
        }
    }

    /// Writes accumulator tiles (this thread's fragments, converted to `fmt`; rows = the
    /// warp's rows, columns from `cols`) into `tile` at shared address `smem`: dS^T, P^T,
    /// or an output staged for [`Warp::store_rows_staged`]. Eight rows at one logical
    /// chunk sit in eight distinct bank groups, so the 4-byte stores are conflict-free.
    pub fn store_tile(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTiles,
        smem: Reg<B32>,
        tile: &SmemTile,
        cols: Cols,
    ) {
        // row r of the thread is its row 0 plus 8 r, with the same swizzle phase: one
        // address per chunk serves every row through the immediate offset
        let col_bytes = b.shl_b32(self.t2, 1u32);
        for nt in 0..acc[0].len() {
            let chunk = match cols {
                Cols::Fixed(nt0) => b.mov((nt0 + nt) as u32),
                Cols::At(c) => b.add_u32(c, nt as u32),
            };
            let off = tile.emit_offset(b, self.rows[0], chunk);
            let off = b.add_u32(off, col_bytes);
            let addr = b.add_u32(smem, off);
            for r in 0..self.rows.len() {
                let (mt, h) = (r / 2, r % 2);
                let frag = acc[mt][nt];
                let word = b.pack(fmt, frag[2 * h], frag[2 * h + 1]);
                let imm = tile.base + 8 * r as u32 * ROW_BYTES;
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
    /// only reads back what it wrote (`bar.warp.sync` orders it). Addresses are built
    /// from a few per-row and per-swizzle-phase registers (the plain per-store swizzle
    /// arithmetic made ptxas spill at d160).
    #[allow(clippy::too_many_arguments)]
    pub fn store_rows_staged(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTiles,
        (tile, smem): (&SmemTile, Reg<B32>),
        base: Reg<B64>,
        row_stride: Reg<B32>,
        head_dim: Reg<B32>,
        valid_rows: Reg<B32>,
    ) {
        let chunks = acc[0].len() as u32; // one 16-byte chunk per 8-column n-tile
        let panel_bytes = tile.rows * ROW_BYTES;
        // the warp's rows start at a multiple of 16, so every row of the thread has the
        // swizzle phase g = row & 7, and `lane` and the warp's first row follow from its
        // first row and t2 (live here anyway; keeping `lane` and `warp_row` alive through
        // the main loop for this would cost registers)
        let g = b.and_b32(self.rows[0], 7u32);
        let warp_row = b.sub_u32(self.rows[0], g);
        let phase: Vec<Reg<B32>> = (0..chunks.min(8))
            .map(|c| {
                let x = b.xor_b32(g, c);
                b.shl_b32(x, 4u32)
            })
            .collect();
        let col_bytes = b.shl_b32(self.t2, 1u32);
        for (r, &row) in self.rows.iter().enumerate() {
            let (mt, h) = (r / 2, r % 2);
            let at = b.mad_lo_u32(row, ROW_BYTES, col_bytes);
            let at = b.add_u32(smem, at);
            for (nt, frag) in acc[mt].iter().enumerate() {
                let addr = b.add_u32(at, phase[nt % 8]);
                let word = b.pack(fmt, frag[2 * h], frag[2 * h + 1]);
                let imm = tile.base + (nt as u32 / 8) * panel_bytes;
                b.st(
                    Space::Shared,
                    Ty::B32,
                    Addr::Shared(addr, imm as i32),
                    &[word],
                );
            }
        }
        b.bar_warp_sync();
        // lanes per row: the row's chunks rounded up to a power of two, at most 32
        let per_row = chunks.next_power_of_two().min(32);
        let rows_per_store = 32 / per_row;
        let t = b.shr_u32(self.t2, 1u32);
        let lane = b.mad_lo_u32(g, 4u32, t);
        let lane_chunk = b.and_b32(lane, per_row - 1);
        let lane_row = b.shr_u32(lane, per_row.trailing_zeros());
        let first_row = b.add_u32(warp_row, lane_row);
        let rows_left = b.sub_s32(valid_rows, first_row);
        let row_bytes = b.shl_b32(row_stride, 1u32);
        let row_step = b.mul_wide_u32(row_bytes, rows_per_store);
        let row0 = b.mul_wide_u32(first_row, row_bytes);
        let row0 = b.add_s64(base, row0);
        // at most 32 chunks (d <= 256): one chunk per lane covers a row
        assert!(chunks <= 32, "generator bug: {chunks} chunks per row");
        let chunk = lane_chunk;
        let col = b.shl_b32(chunk, 3u32);
        let in_kernel = b.setp_u32(Cmp::Lt, chunk, chunks);
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
        let (top, done) = (b.label(), b.label());
        let step8 = b.mul_wide_u32(row_bytes, 8u32);
        let groups = 16 * self.m_tiles as u32 / 8;
        let group = b.mov(0u32);
        b.place(top);
        let more = b.setp_u32(Cmp::Lt, group, groups);
        b.bra_if(more, true, done, true);
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
        b.bra(top, true);
        b.place(done);
    }

    /// Stores accumulator rows (converted to `fmt`) to `base + row * row_stride` for rows
    /// below `valid_rows` and head-dim columns below `head_dim`.
    #[allow(clippy::too_many_arguments)]
    pub fn store_rows(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTiles,
        base: Reg<B64>,
        row_stride: Reg<B32>,
        head_dim: Reg<B32>,
        valid_rows: Reg<B32>,
    ) {
        let row_bytes = b.shl_b32(row_stride, 1u32);
        let col_bytes = b.shl_b32(self.t2, 1u32);
        let col_bytes = b.cvt_u64_u32(col_bytes);
        for (r, &row) in self.rows.iter().enumerate() {
            let (mt, h) = (r / 2, r % 2);
            let row_ok = b.setp_s32(Cmp::Lt, row, valid_rows);
            let addr = b.mad_wide_u32(row, row_bytes, col_bytes);
            let addr = b.add_s64(base, addr);
            for (dt, frag) in acc[mt].iter().enumerate() {
                let col_ok = b.setp_u32(Cmp::Lt, 8 * dt as u32, head_dim);
                let ok = b.and_pred(row_ok, col_ok);
                let packed = b.pack(fmt, frag[2 * h], frag[2 * h + 1]);
                b.when(ok, false, |b| {
                    b.st(
                        Space::Global,
                        Ty::B32,
                        Addr::Global(addr, 16 * dt as i32),
                        &[packed],
                    )
                });
            }
        }
    }
}
