//! Kernel layer, sm_90a: what the first forward's roles share (see `fwd`): the block
//! sizes, the shared-memory layout, the mbarrier offsets, and the CTA's context with the
//! stage and barrier arithmetic of the K/V rings.

use crate::ptx::{Addr, B32, Builder, Reg};

/// Keys per block.
pub const BLOCK_N: u32 = 128;
/// Buffers of the K and V rings.
pub(super) const STAGES: u32 = 2;
/// Rows of a consumer warpgroup.
pub(super) const WG_ROWS: u32 = 64;
/// The first named barrier of the consumers' GEMM-issue order (`bar.sync 0` is the CTA's).
pub(super) const ISSUE_BAR: u32 = 1;
/// The first named barrier of the TMA epilogue's (consumer `c` meets its warps at
/// `EPI_BAR + c`, after the issue order's `ISSUE_BAR..ISSUE_BAR + 3`).
pub(super) const EPI_BAR: u32 = 4;

/// Shared memory: the mbarriers, then the Q slots, the K stages, the V stages (1024-byte
/// aligned). The persistent kernel has two Q slots (tile `j` in slot `j & 1`), so that the
/// producer loads a tile's Q while the consumers still work on the tile before.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    pub(super) tile_bytes: u32,
    pub(super) q: u32,
    /// Bytes of one Q slot.
    pub(super) q_bytes: u32,
    pub(super) q_slots: u32,
    pub(super) k: u32,
    pub(super) v: u32,
}

/// Barrier offsets: Q full; K full, K empty, V full, V empty per stage; Q empty (the
/// persistent kernel's: the consumers are done with a tile's Q); the second Q slot's
/// Q full and Q empty `Q_SLOT_BARS` further on.
pub(super) const Q_FULL: i32 = 0;
pub(super) const K_FULL: i32 = 8;
pub(super) const K_EMPTY: i32 = 24;
pub(super) const V_FULL: i32 = 40;
pub(super) const V_EMPTY: i32 = 56;
pub(super) const Q_EMPTY: i32 = 72;
pub(super) const Q_SLOT_BARS: u32 = 80;

impl Layout {
    /// `block_m` query rows of head dim `d` in `q_slots` (1 or 2) Q slots.
    pub(super) fn new(d: u32, block_m: u32, q_slots: u32) -> Self {
        assert!(
            (1..=2).contains(&q_slots),
            "generator bug: {q_slots} Q slots"
        );
        let tile_bytes = BLOCK_N * d * 2;
        let (q, q_bytes) = (1024, block_m * d * 2);
        assert_eq!(
            q_bytes % 1024,
            0,
            "generator bug: a Q slot breaks the 1024-byte alignment"
        );
        let k = q + q_slots * q_bytes;
        Layout {
            tile_bytes,
            q,
            q_bytes,
            q_slots,
            k,
            v: k + STAGES * tile_bytes,
        }
    }
    pub(super) fn bytes(&self) -> u32 {
        self.v + STAGES * self.tile_bytes
    }

    /// One thread's initialisation of the barriers at `smem`: Q full; per stage K full /
    /// empty, V full / empty (an arrival per consumer warpgroup); Q empty (persistent: an
    /// arrival per consumer warp, `Consumer::release_q`); the second Q slot's.
    pub(super) fn init_barriers(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        (consumers, persistent): (u32, bool),
    ) {
        let bar = |off: i32| Addr::Shared(smem, off);
        b.mbarrier_init(bar(Q_FULL), 1);
        for s in 0..STAGES as i32 {
            b.mbarrier_init(bar(K_FULL + 8 * s), 1);
            b.mbarrier_init(bar(V_FULL + 8 * s), 1);
            b.mbarrier_init(bar(K_EMPTY + 8 * s), consumers);
            b.mbarrier_init(bar(V_EMPTY + 8 * s), consumers);
        }
        let q_users = if persistent { 4 * consumers } else { consumers };
        b.mbarrier_init(bar(Q_EMPTY), q_users);
        for s in 1..self.q_slots as i32 {
            b.mbarrier_init(bar(Q_FULL + s * Q_SLOT_BARS as i32), 1);
            b.mbarrier_init(bar(Q_EMPTY + s * Q_SLOT_BARS as i32), q_users);
        }
    }
}

/// The CTA's `j`-th tile's Q slot: its address (`smem + slot * q_bytes`: add `Layout::q`)
/// and its barriers' base (`Q_FULL` and `Q_EMPTY` sit at their offsets from it).
pub(super) struct QSlot {
    pub(super) smem: Reg<B32>,
    pub(super) bars: Reg<B32>,
    j: Reg<B32>,
    slots: u32,
}

impl QSlot {
    pub(super) fn of(b: &mut Builder, (smem, lay): (Reg<B32>, &Layout), j: Reg<B32>) -> Self {
        let slots = lay.q_slots;
        if slots == 1 {
            return QSlot {
                smem,
                bars: smem,
                j,
                slots,
            };
        }
        let s = b.and_b32(j, 1u32);
        let q = b.mad_lo_u32(s, lay.q_bytes, smem);
        let bars = b.mad_lo_u32(s, Q_SLOT_BARS, smem);
        QSlot {
            smem: q,
            bars,
            j,
            slots,
        }
    }

    /// The parity of the slot's `j`-th tile's use: `j & 1`, with two slots `(j >> 1) & 1`.
    pub(super) fn ph(&self, b: &mut Builder) -> Reg<B32> {
        let u = if self.slots == 1 {
            self.j
        } else {
            b.shr_u32(self.j, 1u32)
        };
        b.and_b32(u, 1u32)
    }

    /// The slot's barrier at `base` (`Q_FULL`, `Q_EMPTY`).
    pub(super) fn bar(&self, base: i32) -> Addr {
        Addr::Shared(self.bars, base)
    }
}

/// A tile's key blocks under a sliding window (`fwd_sched::window_blocks`): they start at `lo`
/// (the first row's first key's block), not at 0, and the last `n_left` visited (the
/// lowest blocks) cross some row's left edge.
#[derive(Clone, Copy)]
pub(super) struct TileWindow {
    pub(super) lo: Reg<B32>,
    pub(super) n_left: Reg<B32>,
}

/// What both roles share about one tile.
pub(super) struct Ctx {
    pub(super) d: u32,
    /// Consumer warpgroups (64 query rows each).
    pub(super) consumers: u32,
    pub(super) lay: Layout,
    pub(super) smem: Reg<B32>,
    /// Key blocks the CTA visits, last first.
    pub(super) n_blocks: Reg<B32>,
    /// How many of them (the first visited, the last keys) need a mask (see
    /// `fwd::masked_blocks`).
    pub(super) n_masked: Reg<B32>,
    /// Under a sliding window: the first key block and the visits (the last) that need
    /// the left edge's mask (`fwd_sched::window_blocks`).
    pub(super) window: Option<TileWindow>,
    pub(super) head: Reg<B32>,
    pub(super) kv_head: Reg<B32>,
    pub(super) batch: Reg<B32>,
    /// Key blocks of the CTA's earlier tiles: the rings' position at this tile's first.
    pub(super) it0: Reg<B32>,
    /// The consumers find the tile's Q landed (the dynamic scheduler waited for it to
    /// read the tile's index).
    pub(super) q_landed: bool,
}

/// One key block's place in the K/V rings.
pub(super) struct Stage {
    /// The phase parity the block's barriers complete with: `(n / 2) & 1`.
    pub(super) ph: Reg<B32>,
    /// The stage's shared address, `smem + s * tile_bytes` (add a tile's offset).
    pub(super) smem: Reg<B32>,
    /// `smem + 8 s`: the stage's barriers sit at their offsets from it.
    bars: Reg<B32>,
}

impl Stage {
    /// Ring position `n`'s stage `s = n & 1` in the shared memory at `smem` (stages
    /// `tile_bytes` apart).
    pub(super) fn at(b: &mut Builder, (smem, tile_bytes): (Reg<B32>, u32), n: Reg<B32>) -> Self {
        let s = b.and_b32(n, 1u32);
        let ph = b.shr_u32(n, 1u32);
        let ph = b.and_b32(ph, 1u32);
        let off = b.mul_lo_u32(s, tile_bytes);
        let st = b.add_u32(smem, off);
        let bars = b.mad_lo_u32(s, 8u32, smem);
        Stage { ph, smem: st, bars }
    }

    /// The stage's barrier at `base` (`K_FULL`, `K_EMPTY`, `V_FULL`, `V_EMPTY`).
    pub(super) fn bar(&self, base: i32) -> Addr {
        Addr::Shared(self.bars, base)
    }
}

impl Ctx {
    /// Query rows per CTA.
    pub(super) fn block_m(&self) -> u32 {
        self.consumers * WG_ROWS
    }

    /// The key block visited `i`-th: `lo + n_blocks - 1 - i` (`lo` = 0 without a window;
    /// the last first, as FA3: the masked blocks come before the clean ones).
    pub(super) fn key_block(&self, b: &mut Builder, i: Reg<B32>) -> Reg<B32> {
        let last = b.sub_u32(self.n_blocks, 1u32);
        let last = match self.window {
            Some(w) => b.add_u32(last, w.lo),
            None => last,
        };
        b.sub_u32(last, i)
    }

    /// The first key of the block visited `i`-th.
    pub(super) fn key_row(&self, b: &mut Builder, i: Reg<B32>) -> Reg<B32> {
        let n = self.key_block(b, i);
        b.mul_lo_u32(n, BLOCK_N)
    }

    /// The `i`-th visited block's stage: ring position `n = it0 + i`, stage `s = n & 1`;
    /// its parity, address and barriers.
    pub(super) fn stage(&self, b: &mut Builder, i: Reg<B32>) -> Stage {
        let n = b.add_u32(self.it0, i);
        Stage::at(b, (self.smem, self.lay.tile_bytes), n)
    }
}
