//! Kernel layer: a warp's share of a block: its m16 row tiles, fragment coordinates,
//! per-lane `ldmatrix` addressing, and the two tile products of FA2 (A B^T from shared
//! memory, and register-A times B from shared memory); its stores are in `warp_store`.

use crate::ptx::{B32, Builder, HalfFmt, Reg, Special};
use crate::tile::acc::AccTile;
use crate::tile::frag::{LDM_A, LDM_B_KN_TRANS, LDM_B_NK};
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
    /// The thread's rows inside the block: its accumulators' thread rows
    /// ([`AccTile::row_offset`] from the lane's row g in the warp's first row).
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
        let t2 = AccTile::lane_col(b, lane);
        let g = AccTile::lane_row(b, lane);
        let block = match blocks {
            Some(n) => b.rem_u32(warp, n),
            None => warp,
        };
        let warp_row = b.mul_lo_u32(block, 16 * m_tiles as u32);
        let rows = (0..AccTile::thread_rows(m_tiles))
            .map(AccTile::row_offset)
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
    pub fn acc_zeros(&self, b: &mut Builder, n_cols: u32) -> AccTile {
        AccTile::zeros(b, self.m_tiles, n_cols)
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
        acc: &mut AccTile,
        a: &AOperand,
        bt: (&SmemTile, Reg<B32>),
        k_dim: u32,
    ) {
        let n_tiles = acc.n_tiles() as u32;
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
                    mma_pair(b, fmt, acc, (mt, 2 * np as usize), *a_mt, bf);
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
        acc: &mut AccTile,
        a: &[Vec<[Reg<B32>; 4]>],
        b_tile: (&SmemTile, Reg<B32>),
        chunk0: u32,
    ) {
        assert_eq!(acc.m_tiles(), a.len(), "generator bug: m-tiles of A and C");
        assert!(acc.n_tiles() % 2 == 0, "generator bug: odd n-tile count");
        for kk in 0..a[0].len() {
            for np in 0..acc.n_tiles() as u32 / 2 {
                let addr =
                    self.b_lanes
                        .addr(b, b_tile.1, b_tile.0, 16 * kk as u32, chunk0 + 2 * np);
                let bf = b.ldmatrix::<4>(true, addr);
                for (mt, a_mt) in a.iter().enumerate() {
                    mma_pair(b, fmt, acc, (mt, 2 * np as usize), a_mt[kk], bf);
                }
            }
        }
    }
}

/// `acc[mt][nt] += a * B` and `acc[mt][nt + 1] += a * B'`: the two n8 halves of an
/// `ldmatrix.x4` B fragment `bf` (registers 0-1, then 2-3).
fn mma_pair(
    b: &mut Builder,
    fmt: HalfFmt,
    acc: &mut AccTile,
    (mt, nt): (usize, usize),
    a: [Reg<B32>; 4],
    bf: [Reg<B32>; 4],
) {
    b.mma(fmt, acc.frag(mt, nt), a, [bf[0], bf[1]]);
    b.mma(fmt, acc.frag(mt, nt + 1), a, [bf[2], bf[3]]);
}

/// `[kk][mt]` fragments (as [`Warp::load_a`] gives them) as `[mt][kk]`, the order of
/// [`Warp::mma_a_b`].
pub fn by_m_tile(a: AFrags) -> Vec<Vec<[Reg<B32>; 4]>> {
    let m_tiles = a[0].len();
    (0..m_tiles)
        .map(|mt| a.iter().map(|kk| kk[mt]).collect())
        .collect()
}
