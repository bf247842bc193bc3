//! Kernel layer, sm_90a: which (query block, head, batch) tiles a forward CTA computes
//! ([`Grid`]): one per CTA from its grid coordinates; or, persistent, a static zigzag over
//! every tile (CTA `c` of `G` takes tiles `c, 2G - 1 - c, 2G + c, ...`) so that a tile's
//! prologue and epilogue overlap the loads of the next, in the grid's order (a head's
//! query blocks together, causal ones longest first; the zigzag pairs a CTA's long causal
//! tile with a short one: with a plain round-robin and `G` a multiple of the query blocks
//! per head, 132 SMs and d64 causal 2K: 11, every CTA would take the same query block of
//! each head); or tiles claimed from a counter (`fwd_dynamic`).

use super::fwd_ctx::{BLOCK_N, Layout, Q_EMPTY, QSlot, TileWindow};
use crate::kernels::mask::{KeyRule, Window};
use crate::ptx::{B32, B64, Builder, Cmp, Reg, Special};

/// How the CTAs find their tiles.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Grid {
    /// One CTA per tile, from its grid coordinates.
    Plain,
    /// One CTA per SM, a static zigzag in the grid's order.
    Zigzag,
    /// One CTA per SM, tiles claimed from a counter (FA3's dynamic scheduler).
    Dynamic,
}

/// The problem as the scheduler sees it.
pub(super) struct Sched {
    pub(super) grid: Grid,
    /// Which keys a query sees (a window's bounds clamped: `left <= sk`, `right <= sq`).
    pub(super) rule: KeyRule,
    pub(super) block_m: u32,
    pub(super) head_dim: u32,
    /// The dynamic scheduler's claim counter (global `u32[2]`: claims, CTAs done).
    pub(super) counter: Option<Reg<B64>>,
    pub(super) sq: Reg<B32>,
    pub(super) sk: Reg<B32>,
    pub(super) heads: Reg<B32>,
    pub(super) group: Reg<B32>,
    pub(super) batches: Reg<B32>,
}

/// One tile's coordinates and key-block counts.
pub(super) struct Tile {
    pub(super) m0: Reg<B32>,
    pub(super) head: Reg<B32>,
    pub(super) kv_head: Reg<B32>,
    pub(super) batch: Reg<B32>,
    /// Key blocks the tile visits (see [`key_blocks`]).
    pub(super) n_blocks: Reg<B32>,
    /// How many of them, visited first, need a mask (see [`masked_blocks`]).
    pub(super) n_masked: Reg<B32>,
    /// Under a sliding window: where its key blocks start and which need the left edge.
    pub(super) window: Option<TileWindow>,
}

/// Where a tile's work sits in the CTA's sequence: the tiles before it (`j`, the parity of
/// the Q barriers) and the key blocks before it (`it0`, the rings' position).
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub(super) j: Reg<B32>,
    pub(super) it0: Reg<B32>,
}

impl Place {
    /// Past a tile of `n_blocks` key blocks: the next tile's place (in the same registers,
    /// for a loop).
    pub(super) fn advance(self, b: &mut Builder, n_blocks: Reg<B32>) {
        let it1 = b.add_u32(self.it0, n_blocks);
        b.assign(self.it0, it1);
        let j1 = b.add_u32(self.j, 1u32);
        b.assign(self.j, j1);
    }
}

impl Sched {
    /// Whether the causal mask is the rule (its query blocks visited longest first).
    pub(super) fn causal(&self) -> bool {
        matches!(self.rule, KeyRule::Causal)
    }

    /// The tile count, and the query blocks per head.
    pub(super) fn tiles(&self, b: &mut Builder) -> (Reg<B32>, Reg<B32>) {
        let m_blocks = b.add_u32(self.sq, self.block_m - 1);
        let m_blocks = b.div_u32(m_blocks, self.block_m);
        let bh = b.mul_lo_u32(self.heads, self.batches);
        (b.mul_lo_u32(m_blocks, bh), m_blocks)
    }

    /// The producer thread: runs `body` on each of the CTA's tiles (`slot`: the tile's Q
    /// slot, free); returns the key blocks of all of them.
    pub(super) fn produce_tiles(
        &self,
        b: &mut Builder,
        (smem, lay): (Reg<B32>, &Layout),
        mut body: impl FnMut(&mut Builder, &Tile, Place, &QSlot),
    ) -> Reg<B32> {
        match self.grid {
            Grid::Plain => {
                let tile = self.grid_tile(b);
                let zero = b.mov(0u32);
                let slot = QSlot::of(b, (smem, lay), zero);
                body(b, &tile, Place { j: zero, it0: zero }, &slot);
                tile.n_blocks
            }
            Grid::Zigzag => self.zigzag(b, true, |b, tile, at| {
                let slot = QSlot::of(b, (smem, lay), at.j);
                let ph = slot.ph(b);
                let ph = b.xor_b32(ph, 1u32);
                b.mbarrier_wait(slot.bar(Q_EMPTY), ph, "Q empty");
                body(b, tile, at, &slot);
            }),
            Grid::Dynamic => self.produce_claimed(b, (smem, lay), body),
        }
    }

    /// The consumers: runs `body` on each of the CTA's tiles (dynamic: once its Q has
    /// landed, `fwd_dynamic`; otherwise `body` waits for it); returns the key blocks of
    /// all of them.
    pub(super) fn consume_tiles(
        &self,
        b: &mut Builder,
        (smem, lay): (Reg<B32>, &Layout),
        mut body: impl FnMut(&mut Builder, &Tile, Place),
    ) -> Reg<B32> {
        match self.grid {
            Grid::Plain => {
                let tile = self.grid_tile(b);
                let zero = b.mov(0u32);
                body(b, &tile, Place { j: zero, it0: zero });
                tile.n_blocks
            }
            Grid::Zigzag => self.zigzag(b, false, body),
            Grid::Dynamic => self.consume_claimed(b, (smem, lay), body),
        }
    }

    /// The static zigzag: runs `body` on each of the CTA's tiles (a uniform loop, or
    /// `divergent` for the producer's single thread); returns their key blocks.
    fn zigzag(
        &self,
        b: &mut Builder,
        divergent: bool,
        mut body: impl FnMut(&mut Builder, &Tile, Place),
    ) -> Reg<B32> {
        let (tiles, m_blocks) = self.tiles(b);
        let ctas = b.special(Special::NCtaIdX);
        let c = b.special(Special::CtaIdX);
        // round j: tile j * ctas + c, or + (ctas - 1 - c) in odd rounds
        let back = b.sub_u32(ctas, 1u32);
        let back = b.sub_u32(back, c);
        let (j, it) = (b.mov(0u32), b.mov(0u32));
        let lp = if divergent {
            b.loop_start_divergent()
        } else {
            b.loop_start()
        };
        let odd = b.and_b32(j, 1u32);
        let odd = b.setp_u32(Cmp::Ne, odd, 0u32);
        let k = b.selp_b32(back, c, odd);
        let t = b.mad_lo_u32(j, ctas, k);
        let more = b.setp_u32(Cmp::Lt, t, tiles);
        b.loop_exit_unless(&lp, more);
        let tile = self.grid_order_tile(b, t, m_blocks);
        body(b, &tile, Place { j, it0: it });
        Place { j, it0: it }.advance(b, tile.n_blocks);
        b.loop_end(lp);
        it
    }

    /// The tile of the CTA's grid coordinates: query block x (the last first when
    /// causal: the longest are scheduled first), head y, batch z.
    fn grid_tile(&self, b: &mut Builder) -> Tile {
        let x = b.special(Special::CtaIdX);
        let x = if self.causal() {
            let nx = b.special(Special::NCtaIdX);
            let nx = b.sub_u32(nx, 1u32);
            b.sub_u32(nx, x)
        } else {
            x
        };
        let head = b.special(Special::CtaIdY);
        let batch = b.special(Special::CtaIdZ);
        self.coords(b, x, head, batch)
    }

    /// Tile `t` of `m_blocks * bh` (`bh` = heads * batches) in the grid's order: a head's
    /// query blocks in turn (neighbouring CTAs read the same K and V from L2), the last
    /// first when causal (the longest). The first order tried, causal query blocks from
    /// the last over every (head, batch), ran d128 causal 2K at 0.74x the non-persistent
    /// kernel (H100, docs/bench/sm90_fwd_v4: 132 heads' K and V at once).
    fn grid_order_tile(&self, b: &mut Builder, t: Reg<B32>, m_blocks: Reg<B32>) -> Tile {
        let x = b.rem_u32(t, m_blocks);
        let x = if self.causal() {
            let last = b.sub_u32(m_blocks, 1u32);
            b.sub_u32(last, x)
        } else {
            x
        };
        let hb = b.div_u32(t, m_blocks);
        let head = b.rem_u32(hb, self.heads);
        let batch = b.div_u32(hb, self.heads);
        self.coords(b, x, head, batch)
    }

    pub(super) fn coords(
        &self,
        b: &mut Builder,
        x: Reg<B32>,
        head: Reg<B32>,
        batch: Reg<B32>,
    ) -> Tile {
        let m0 = b.mul_lo_u32(x, self.block_m);
        let kv_head = b.div_u32(head, self.group);
        self.tile_at(b, [m0, head, kv_head, batch])
    }

    /// The tile of first query row `m0`, `head`, its `kv_head` and `batch`: its key
    /// blocks (no division: the consumers of the dynamic grid run it on coordinates the
    /// producer decoded).
    pub(super) fn tile_at(
        &self,
        b: &mut Builder,
        [m0, head, kv_head, batch]: [Reg<B32>; 4],
    ) -> Tile {
        let (n_blocks, n_masked, window) = match self.rule.window() {
            Some(w) => {
                let (n, masked, win) = window_blocks(b, w, (m0, self.block_m), self.sq, self.sk);
                (n, masked, Some(win))
            }
            None => {
                let causal = self.causal();
                let n = key_blocks(b, causal, (m0, self.block_m), self.sq, self.sk);
                let masked = masked_blocks(b, causal, (m0, n), self.sq, self.sk);
                (n, masked, None)
            }
        };
        Tile {
            m0,
            head,
            kv_head,
            batch,
            n_blocks,
            n_masked,
            window,
        }
    }
}

/// Key blocks the query block of `block_m` rows at `m0` visits: `ceil(sk / 128)`, causal:
/// up to its last row's diagonal `m0 + block_m - 1 + sk - sq` (none when that is negative).
fn key_blocks(
    b: &mut Builder,
    causal: bool,
    (m0, block_m): (Reg<B32>, u32),
    sq: Reg<B32>,
    sk: Reg<B32>,
) -> Reg<B32> {
    let nk = b.add_u32(sk, BLOCK_N - 1);
    let nk = b.shr_u32(nk, BLOCK_N.trailing_zeros());
    if !causal {
        return nk;
    }
    let end = b.add_u32(m0, block_m);
    let end = b.add_u32(end, sk);
    let end = b.sub_s32(end, sq);
    let end = b.max_s32(end, 0i32);
    let nc = b.add_u32(end, BLOCK_N - 1);
    let nc = b.shr_u32(nc, BLOCK_N.trailing_zeros());
    b.min_u32(nk, nc)
}

/// Of the `n_blocks` key blocks, the last ones that need a mask: those past the first
/// key a query of the block at `m0` does not see (its first row's causal limit
/// `m0 + 1 + sk - sq`, or `sk`). At least 1 when `n_blocks` is not 0 (the consumers mask
/// the first block they visit, the last one, in any case).
fn masked_blocks(
    b: &mut Builder,
    causal: bool,
    (m0, n_blocks): (Reg<B32>, Reg<B32>),
    sq: Reg<B32>,
    sk: Reg<B32>,
) -> Reg<B32> {
    let seen = if causal {
        let lim = b.add_u32(m0, 1u32);
        let lim = b.add_u32(lim, sk);
        let lim = b.sub_s32(lim, sq);
        let lim = b.min_s32(lim, sk);
        b.max_s32(lim, 0i32)
    } else {
        sk
    };
    let clean = b.shr_u32(seen, BLOCK_N.trailing_zeros());
    let clean = b.min_u32(clean, n_blocks);
    let masked = b.sub_u32(n_blocks, clean);
    let one = b.min_u32(n_blocks, 1u32);
    b.max_u32(masked, one)
}

/// The key blocks of the query block of `block_m` rows at `m0` under window `w` (key j
/// visible to query i iff `i + sk - sq - left <= j <= i + sk - sq + right`, `j < sk`):
/// `[lo, hi)`, from the first row's first key to the last row's last (`hi - lo` visits,
/// none when the windows miss every key); of the visits (the last block first), the
/// first `n_masked` cross some row's right edge or the sequence end (at least 1 when
/// there is a visit: the first is masked in any case) and the last `n_left` some row's
/// left edge. Returns `(hi - lo, n_masked, (lo, n_left))`. In i32: `sq + sk + block_m`
/// stays below 2^31 (the runtime's window check).
fn window_blocks(
    b: &mut Builder,
    w: Window,
    (m0, block_m): (Reg<B32>, u32),
    sq: Reg<B32>,
    sk: Reg<B32>,
) -> (Reg<B32>, Reg<B32>, TileWindow) {
    let shift = BLOCK_N.trailing_zeros();
    let ceil_blocks = |b: &mut Builder, keys: Reg<B32>| {
        let k = b.max_s32(keys, 0i32);
        let k = b.add_u32(k, BLOCK_N - 1);
        b.shr_u32(k, shift)
    };
    let diag = b.sub_s32(sk, sq);
    let nk = ceil_blocks(b, sk);
    // past the last row's right edge: m0 + block_m - 1 + diag + right + 1
    let end = b.add_u32(m0, block_m);
    let end = b.add_s32(end, diag);
    let end = b.add_s32(end, w.right);
    let hi = ceil_blocks(b, end);
    let hi = b.min_u32(hi, nk);
    // the first row's first key: m0 + diag - left
    let first = b.add_s32(m0, diag);
    let first = b.sub_s32(first, w.left);
    let first = b.max_s32(first, 0i32);
    let lo = b.shr_u32(first, shift);
    let lo = b.min_u32(lo, hi);
    let n = b.sub_u32(hi, lo);
    // blocks wholly below the first row's right limit need no right-edge mask
    let lim = b.add_u32(m0, 1u32);
    let lim = b.add_s32(lim, diag);
    let lim = b.add_s32(lim, w.right);
    let lim = b.min_s32(lim, sk);
    let lim = b.max_s32(lim, 0i32);
    let clean = b.shr_u32(lim, shift);
    let clean = b.min_u32(clean, hi);
    let clean = b.max_u32(clean, lo);
    let masked = b.sub_u32(hi, clean);
    let one = b.min_u32(n, 1u32);
    let n_masked = b.max_u32(masked, one);
    // blocks that start before the last row's first key cross its left edge
    let f_last = b.add_u32(m0, block_m - 1);
    let f_last = b.add_s32(f_last, diag);
    let f_last = b.sub_s32(f_last, w.left);
    let left_hi = ceil_blocks(b, f_last);
    let left_hi = b.min_u32(left_hi, hi);
    let left_hi = b.max_u32(left_hi, lo);
    let n_left = b.sub_u32(left_hi, lo);
    (n, n_masked, TileWindow { lo, n_left })
}
