//! Kernel layer: the rows of a packed variable-length batch (the varlen passes,
//! [`crate::abi::varlen`]): the CTA's sequence (`%ctaid.z`), its first query and key rows
//! and its lengths, read from `cu_seqlens_q` / `cu_seqlens_k` and clamped to the buffers.
//! [`Params`] answers with them, so a dense kernel body runs unchanged over one sequence
//! of the packed buffers.
//!
//! Each value is read where it is used, not kept from the opening: the offsets are a
//! cached global load away, while a register held through the main loops costs the
//! backward spills (its dense twin reads its lengths from the constant bank).

use super::params::Params;
use crate::abi::{Arg, CU_SEQLENS_K, CU_SEQLENS_Q, TOTAL_K, TOTAL_Q};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, LdCache, Reg, Space, Special, Ty};

/// Which side of the packed buffers: the queries (q, o, dO, dq) or the keys (k, v, dk, dv).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Rows `cu_seqlens_q[b] ..` of `total_q`.
    Queries,
    /// Rows `cu_seqlens_k[b] ..` of `total_k`.
    Keys,
}

impl Side {
    fn args(self) -> (Arg<B64>, Arg<B32>) {
        match self {
            Side::Queries => (CU_SEQLENS_Q, TOTAL_Q),
            Side::Keys => (CU_SEQLENS_K, TOTAL_K),
        }
    }
}

/// The CTA's sequence of a packed batch (a varlen pass's [`Params`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Packed {
    /// The sequence's index, where the CTA order remaps it (`None`: `%ctaid.z`).
    pub seq: Option<Reg<B32>>,
}

impl Packed {
    /// The sequence's first row on `side`: `cu[b]` clamped to `[0, total]`.
    pub fn first(b: &mut Builder, p: &Params, side: Side) -> Reg<B32> {
        let (addr, total) = offsets(b, p, side);
        let [start]: [Reg<B32>; 1] = load(b, addr, 0);
        clamp(b, start, total)
    }

    /// The sequence's row count on `side`: `cu[b + 1] - cu[b]`, both clamped to `[0,
    /// total]` and the end to at least the start.
    pub fn len(b: &mut Builder, p: &Params, side: Side) -> Reg<B32> {
        let (addr, total) = offsets(b, p, side);
        let [start]: [Reg<B32>; 1] = load(b, addr, 0);
        let [end]: [Reg<B32>; 1] = load(b, addr, 4);
        let start = clamp(b, start, total);
        let end = clamp(b, end, total);
        let end = b.max_u32(end, start);
        b.sub_u32(end, start)
    }

    /// Index of `stat[head, first + row0]` in an f32 `[heads, total_q]` array.
    pub fn stats_index(b: &mut Builder, p: &Params, head: Reg<B32>, row0: Reg<B32>) -> Reg<B64> {
        let q0 = Self::first(b, p, Side::Queries);
        let r = b.mul_wide_u32(head, p.get(TOTAL_Q));
        let row = b.add_u32(q0, row0);
        let row = b.cvt_u64_u32(row);
        b.add_s64(r, row)
    }

    /// The sequence's first row in the dq accumulator: `16 floor((first + 16 b) / 16)`
    /// (a tile of its own, see [`crate::abi::varlen`]).
    pub fn accum_row0(b: &mut Builder, p: &Params) -> Reg<B32> {
        let q0 = Self::first(b, p, Side::Queries);
        let seq = sequence(b, p);
        let r = b.mad_lo_u32(seq, 16u32, q0);
        b.and_b32(r, !15u32)
    }

    /// Accumulator rows per head: `total_q + 16 batch` (rounded up to tiles by the grid).
    pub fn accum_rows(b: &mut Builder, p: &Params) -> Reg<B32> {
        let batch = b.special(Special::NCtaIdZ);
        b.mad_lo_u32(batch, 16u32, p.get(TOTAL_Q))
    }

    /// Ends the CTA when its first row `first` is past its sequence's `len` rows (the
    /// grid covers the longest sequence).
    pub fn exit_past(b: &mut Builder, first: Reg<B32>, len: Reg<B32>) {
        let past = b.setp_u32(Cmp::Ge, first, len);
        b.if_uniform(past, Builder::ret);
    }
}

/// The address of `cu[b]` on `side` (`b = %ctaid.z`) and the side's row count.
fn offsets(b: &mut Builder, p: &Params, side: Side) -> (Reg<B64>, Reg<B32>) {
    let (cu, total) = side.args();
    let seq = sequence(b, p);
    let base = b.cvta_global(p.get(cu));
    (b.mad_wide_u32(seq, 4u32, base), p.get(total))
}

/// The CTA's sequence index.
fn sequence(b: &mut Builder, p: &Params) -> Reg<B32> {
    match p.packed().and_then(|pk| pk.seq) {
        Some(s) => s,
        None => b.special(Special::CtaIdZ),
    }
}

fn load(b: &mut Builder, addr: Reg<B64>, off: i32) -> [Reg<B32>; 1] {
    b.ld(
        Space::Global,
        LdCache::NonCoherent,
        Ty::B32,
        Addr::Global(addr, off),
    )
}

/// An i32 offset clamped to `[0, total]`.
fn clamp(b: &mut Builder, x: Reg<B32>, total: Reg<B32>) -> Reg<B32> {
    let x = b.max_s32(x, 0i32);
    b.min_u32(x, total)
}
