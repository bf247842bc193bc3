//! Kernel layer: the forward's exchange layout ([`Sm80Layout::Exchange`] on a forward
//! row): the warps of a CTA split each key block between them for S = Q K^T and the head
//! dim for O += P V, so that every K, V and Q fragment read from shared memory feeds two
//! m-tiles.
//!
//! Warp w owns the 32 query rows of row block `w % (block_m / 32)` (two m16 tiles) and is
//! member `c = w / (block_m / 32)` of that block's group of `G = warps / (block_m / 32)`
//! warps. For S it takes keys `c * block_n / G ..` of the block; the group agrees on each
//! row's max through shared memory (a named barrier of the G warps), each warp turns its
//! scores into P and writes them to a `[block_m][block_n]` tile; after the next barrier
//! every warp reads P of all the block's keys for its rows back as A fragments and
//! computes O for head-dim columns `c * d / G ..`. Each warp keeps its own share of the
//! row sums; they are added at the end. The d256 forward has 16 rows per warp otherwise
//! (the O accumulator fills the registers), where a K or V fragment feeds one mma and the
//! kernel waits on shared memory: split this way, it reads 21% fewer bytes per mma.
//!
//! [`Sm80Layout::Exchange`]: crate::spec::Sm80Layout::Exchange

use super::warp::{Warp, by_m_tile};
use super::warp_store::Cols;
use crate::ptx::{Addr, B32, Builder, Cmp, F32, HalfFmt, LdCache, Pred, Reg, Space, Ty};
use crate::spec::KernelPlan;
use crate::tile::acc::AccTile;
use crate::tile::smem::{ROW_BYTES, SmemTile};

/// Rows per warp in the exchange layout (two m16 tiles).
pub const ROWS_PER_WARP: u32 = 32;

/// One kernel's exchange layout: the warp's group and member index, and the shared tiles.
pub struct FwdExchange {
    groups: u32,
    /// This warp's place in its row block's group (`c`).
    member: Reg<B32>,
    /// The named barrier of the row block's group (1 + row block).
    barrier: Reg<B32>,
    /// P `[block_m][block_n]`.
    p_tile: SmemTile,
    /// Byte offset of the row statistics `[G][block_m]` f32.
    stats: u32,
    block_n: u32,
    d: u32,
}

impl FwdExchange {
    /// The layout of a plan (its rules: `Sm80Tiles::check`), its tiles where the plan's
    /// shared-memory layout puts them.
    pub fn new(b: &mut Builder, plan: &KernelPlan, w: &Warp) -> Self {
        let t = plan.tiles.sm80();
        let row_blocks = t.block_m / ROWS_PER_WARP;
        let member = b.div_u32(w.warp, row_blocks);
        let block = b.rem_u32(w.warp, row_blocks);
        FwdExchange {
            groups: t.warps / row_blocks,
            member,
            barrier: b.add_u32(block, 1u32),
            p_tile: SmemTile::from(plan.smem.exchange[0]),
            stats: plan
                .smem
                .stats
                .expect("generator bug: exchange without statistics"),
            block_n: t.block_n,
            d: plan.spec.head_dim,
        }
    }

    /// Keys of the block per warp.
    pub fn keys(&self) -> u32 {
        self.block_n / self.groups
    }

    /// Head-dim columns of O per warp.
    pub fn cols(&self) -> u32 {
        self.d / self.groups
    }

    /// The warp's keys of the block whose K tile sits at shared address `k_smem` and
    /// whose first key is `n0`: (the shared address of its first K row, its first key).
    pub fn warp_keys(
        &self,
        b: &mut Builder,
        k_smem: Reg<B32>,
        n0: Reg<B32>,
    ) -> (Reg<B32>, Reg<B32>) {
        let key0 = b.mul_lo_u32(self.member, self.keys());
        let at = b.mad_lo_u32(key0, ROW_BYTES, k_smem);
        (at, b.add_u32(n0, key0))
    }

    /// The warp's first head-dim column of O.
    pub fn col0(&self, b: &mut Builder) -> Reg<B32> {
        b.mul_lo_u32(self.member, self.cols())
    }

    /// Whether this warp leaves the rows' LSE to another (all but member 0 of the group).
    pub fn not_lse_writer(&self, b: &mut Builder) -> Reg<Pred> {
        b.setp_u32(Cmp::Ne, self.member, 0u32)
    }

    /// Combines a per-row value over the group (`max` or `+`, in the same order in every
    /// warp, so they all get the same bits): lane 0 of each quad writes the warp's
    /// values, the group meets at its barrier and every thread reads all of them back.
    /// The slots are rewritten only after a later barrier that every reader passed.
    pub fn combine(
        &self,
        b: &mut Builder,
        w: &Warp,
        smem: Reg<B32>,
        vals: &[Reg<F32>],
        op: fn(&mut Builder, Reg<F32>, Reg<F32>) -> Reg<F32>,
    ) -> Vec<Reg<F32>> {
        let bm = self.p_tile.rows;
        // slot of (member, row 0 of the thread): thread row r sits row_offset(r) further
        let slot = b.mad_lo_u32(self.member, bm, w.rows[0]);
        let slot = b.shl_b32(slot, 2u32);
        let slot = b.add_u32(smem, slot);
        let writer = b.setp_u32(Cmp::Eq, w.t2, 0u32);
        b.when(writer, false, |b| {
            for (r, &v) in vals.iter().enumerate() {
                let at = Addr::Shared(slot, (self.stats + 4 * AccTile::row_offset(r)) as i32);
                b.st(Space::Shared, Ty::F32, at, &[v]);
            }
        });
        self.sync(b);
        // row 0 of the thread for member 0: every member's slots, in member order
        let row0 = b.shl_b32(w.rows[0], 2u32);
        let row0 = b.add_u32(smem, row0);
        let mut out = Vec::new();
        for r in 0..vals.len() {
            let mut acc: Option<Reg<F32>> = None;
            for m in 0..self.groups {
                let off = self.stats + 4 * (m * bm + AccTile::row_offset(r));
                let [v] = b.ld(
                    Space::Shared,
                    LdCache::Default,
                    Ty::F32,
                    Addr::Shared(row0, off as i32),
                );
                acc = Some(match acc {
                    None => v,
                    Some(x) => op(b, x, v),
                });
            }
            out.push(acc.expect("two or more members"));
        }
        out
    }

    /// The group's barrier alone (P written before it is readable after it).
    pub fn sync(&self, b: &mut Builder) {
        b.bar_sync_named(self.barrier, 32 * self.groups);
    }

    /// Writes the warp's probabilities (its keys of the block) to the P tile, for
    /// [`FwdExchange::pv`] after a barrier.
    pub fn share_p(&self, b: &mut Builder, fmt: HalfFmt, w: &Warp, p: &AccTile, smem: Reg<B32>) {
        let chunk0 = b.mul_lo_u32(self.member, self.keys() / 8);
        w.store_tile(b, fmt, p, smem, &self.p_tile, Cols::At(chunk0));
    }

    /// `O += P V` for the warp's rows and head-dim columns: P of the whole block from
    /// the P tile, V from `v_tile` at shared address `v_smem`.
    pub fn pv(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        w: &Warp,
        o: &mut AccTile,
        smem: Reg<B32>,
        (v_tile, v_smem): (&SmemTile, Reg<B32>),
    ) {
        let a = by_m_tile(w.load_a(b, (&self.p_tile, smem), self.block_n));
        // the warp's columns start a whole number of 64-column panels in
        let panels = b.mul_lo_u32(self.member, self.cols() / 64);
        let v_cols = b.mad_lo_u32(panels, v_tile.rows * ROW_BYTES, v_smem);
        w.mma_a_b(b, fmt, o, &a, (v_tile, v_cols), 0);
    }
}
