//! Tile layer: exact conversions of packed 16-bit elements to f32.

use crate::ptx::{B32, Builder, F32, HalfFmt, Reg};

/// The (low, high) elements of a packed 16x2 word as f32 (exact).
pub fn unpack_f32(b: &mut Builder, fmt: HalfFmt, w: Reg<B32>) -> (Reg<F32>, Reg<F32>) {
    match fmt {
        // bf16 is the high half of an f32: shift or mask, then reinterpret.
        HalfFmt::Bf16 => {
            let lo = b.shl_b32(w, 16u32);
            let hi = b.and_b32(w, 0xFFFF_0000u32);
            (b.bits_f32(lo), b.bits_f32(hi))
        }
        HalfFmt::F16 => {
            let (lo, hi) = b.unpack(w);
            (b.cvt_f32_f16(lo), b.cvt_f32_f16(hi))
        }
    }
}
