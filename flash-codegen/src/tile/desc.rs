//! Tile layer: `wgmma` shared-memory matrix descriptors (ptx-reference.md §10.2) built
//! from the swizzled tiles of [`SmemTile`].
//!
//! An [`SmemTile`] is `[cols/64 panels][rows][64]` 16-bit elements with chunk `c` of row `r`
//! at chunk `c ^ (r & 7)`: exactly the image a TMA load of 64-column boxes with the
//! 128-byte swizzle writes, and what `wgmma` reads with the 128-byte swizzle layout. The
//! tile's rows are one matrix dimension, its columns the other:
//!
//! - **K-major** (`rows` = M or N, `cols` = K: Q and K in S = Q K^T): SBO = 1024 bytes (8
//!   rows of 128), LBO unused (1); k-step `kk` (16 columns) starts at panel `kk / 4`, plus
//!   `32 (kk % 4)` bytes inside it.
//! - **MN-major** (`rows` = K, `cols` = N: V in O = P V, `trans-b` = 1): SBO = 1024 bytes (8
//!   K rows), LBO = one panel (`rows * 128` bytes: the next 64 N columns); k-step `kk` (16 K
//!   rows) starts `2048 kk` bytes in.
//!
//! The swizzle repeats every 1024 bytes from absolute address 0, so a tile must start on a
//! 1024-byte boundary (base offset 0): asserted here, with the dynamic shared memory
//! declared `.align 1024`.

use super::smem::{ROW_BYTES, SmemTile};
use crate::ptx::{B32, B64, Builder, Reg};

/// The swizzle atom: 8 rows of 128 bytes.
pub const ATOM_BYTES: u32 = 1024;

/// Which dimension of the product runs along a tile's 64-element rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Major {
    /// The reduction dimension K is contiguous (the tile's columns are K).
    K,
    /// The M or N dimension is contiguous (the tile's rows are K): `imm-trans` = 1.
    Mn,
}

/// A `wgmma` operand read from a swizzled tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgmmaDesc {
    /// The tile (1024-byte aligned).
    pub tile: SmemTile,
    /// How the product reads it.
    pub major: Major,
}

/// Field encodings of the 64-bit descriptor.
const SWIZZLE_128B: u64 = 1 << 62;
const ADDR_MASK: u32 = 0x3FFFF;

impl WgmmaDesc {
    /// A descriptor over `tile` read `major`; panics (generator bug) unless the tile starts
    /// on a swizzle atom.
    pub fn new(tile: SmemTile, major: Major) -> Self {
        assert!(
            tile.base % ATOM_BYTES == 0,
            "generator bug: wgmma tile at byte {} is not 1024-byte aligned",
            tile.base
        );
        WgmmaDesc { tile, major }
    }

    /// The `imm-trans` flag of this operand.
    pub fn trans(&self) -> bool {
        self.major == Major::Mn
    }

    /// Leading-dimension byte offset.
    pub fn lbo(&self) -> u32 {
        match self.major {
            Major::K => 16,
            Major::Mn => self.tile.rows * ROW_BYTES,
        }
    }

    /// Stride-dimension byte offset.
    pub fn sbo(&self) -> u32 {
        ATOM_BYTES
    }

    /// Every field but the start address.
    pub fn high_bits(&self) -> u64 {
        SWIZZLE_128B | (u64::from(self.sbo() >> 4) << 32) | (u64::from(self.lbo() >> 4) << 16)
    }

    /// K-steps (16 elements of K) the tile holds.
    pub fn k_steps(&self) -> u32 {
        match self.major {
            Major::K => self.tile.cols / 16,
            Major::Mn => self.tile.rows / 16,
        }
    }

    /// Bytes from the tile's start to k-step `kk`'s.
    pub fn kstep_offset(&self, kk: u32) -> u32 {
        assert!(
            kk < self.k_steps(),
            "generator bug: k-step {kk} of a {}-step tile",
            self.k_steps()
        );
        match self.major {
            Major::K => (kk / 4) * self.tile.rows * ROW_BYTES + 32 * (kk % 4),
            Major::Mn => kk * 16 * ROW_BYTES,
        }
    }

    /// The whole descriptor of k-step `kk` when dynamic shared memory starts at shared
    /// address `smem` (host arithmetic, for tests and for checking the emitted code).
    pub fn value(&self, smem: u32, kk: u32) -> u64 {
        let addr = (smem + self.tile.base + self.kstep_offset(kk)) & ADDR_MASK;
        self.high_bits() | u64::from(addr >> 4)
    }

    /// Emits the descriptor of k-step 0, from `smem` (the shared address of the dynamic
    /// shared memory, [`Builder::smem_base`]):
    ///
    /// ```text
    ///     add.u32 %r, smem, base;  and.b32 %r, %r, 0x3FFFF;  shr.u32 %r, %r, 4;
    ///     cvt.u64.u32 %rd, %r;     or.b64 %rd, %rd, HIGH;
    /// ```
    pub fn emit(&self, b: &mut Builder, smem: Reg<B32>) -> Reg<B64> {
        let a = b.add_u32(smem, self.tile.base);
        let a = b.and_b32(a, ADDR_MASK);
        let a = b.shr_u32(a, 4);
        let d = b.cvt_u64_u32(a);
        b.or_b64(d, self.high_bits() as i64)
    }

    /// The descriptor of k-step `kk` from k-step 0's (`d0`, from [`WgmmaDesc::emit`]): the
    /// start address field plus the step's offset in 16-byte units (the field cannot carry
    /// out: shared addresses stay below 2^18).
    pub fn emit_kstep(&self, b: &mut Builder, d0: Reg<B64>, kk: u32) -> Reg<B64> {
        match self.kstep_offset(kk) >> 4 {
            0 => d0,
            step => b.add_s64(d0, i64::from(step)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants verified on the H200 (ptx-reference.md §10.2 (a) and (b)).
    #[test]
    fn fields_match_the_verified_encodings() {
        let k = WgmmaDesc::new(SmemTile::new(0, 64, 64), Major::K);
        assert_eq!(k.high_bits(), 0x4000_0040_0001_0000);
        // V as two [64 kv][64 d] boxes: LBO 8192, SBO 1024.
        let v = WgmmaDesc::new(SmemTile::new(8192, 64, 128), Major::Mn);
        assert_eq!(
            v.high_bits(),
            (1 << 62) | (64 << 32) | ((8192u64 >> 4) << 16)
        );
        assert!(v.trans() && !k.trans());
    }

    /// K-major k-steps walk 32 bytes inside a panel, then to the next panel (d128: steps 4-7
    /// at `rows * 128 + 32 (kk - 4)`); MN-major ones 16 rows of 128 bytes.
    #[test]
    fn k_steps_follow_the_panels() {
        let q = WgmmaDesc::new(SmemTile::new(0, 128, 128), Major::K);
        assert_eq!(q.k_steps(), 8);
        let offs: Vec<u32> = (0..8).map(|kk| q.kstep_offset(kk)).collect();
        assert_eq!(offs, [0, 32, 64, 96, 16384, 16416, 16448, 16480]);
        let v = WgmmaDesc::new(SmemTile::new(0, 128, 64), Major::Mn);
        assert_eq!(v.k_steps(), 8);
        assert_eq!(v.kstep_offset(3), 3 * 2048);
        assert_eq!(q.value(0x400, 5) & 0x3FFF, (0x400u64 + 16416) >> 4);
    }

    #[test]
    #[should_panic(expected = "not 1024-byte aligned")]
    fn an_unaligned_tile_is_a_generator_bug() {
        WgmmaDesc::new(SmemTile::new(512, 64, 64), Major::K);
    }

    #[test]
    #[should_panic(expected = "k-step 4 of a 4-step tile")]
    fn a_k_step_past_the_tile_is_a_generator_bug() {
        WgmmaDesc::new(SmemTile::new(0, 64, 64), Major::K).kstep_offset(4);
    }
}
