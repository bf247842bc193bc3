//! Kernel layer: block scheduling every architecture shares: which key blocks a query
//! block (or a block of packed decode rows) visits (all, up to the causal diagonal, or
//! those a sliding window reaches) and the causal forward's CTA order.

use super::mask::Window;
use super::params::Params;
use crate::abi::SEQLEN_K;
use crate::ptx::{B32, Builder, Reg, Special};
use crate::spec::KernelPlan;

/// The key blocks a query block at `m0` visits under the sliding window `w`: from the one
/// holding its first row's first visible key (`diag - left`) to the one holding its last
/// row's last visible key (`diag + block_m - 1 + right`), within the sequence; `first ==
/// end` when it sees none. Returns `(first, end, diag)`, `diag` as [`kv_blocks`]'.
pub fn window_blocks(
    b: &mut Builder,
    plan: &KernelPlan,
    w: Window,
    (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
    m0: Reg<B32>,
) -> (Reg<B32>, Reg<B32>, Reg<B32>) {
    let t = &plan.tiles;
    let (bm, bn) = (t.block_m(), t.block_n());
    // (a local mask is not causal: every block of the sequence, and the diagonal)
    let (n, diag) = kv_blocks(b, plan, seqlen_q, seqlen_k, m0);
    // end = ceil((diag + block_m + right) / block_n), within 0..=n
    let lim = b.add_s32(diag, w.right);
    let lim = b.add_s32(lim, (bm + bn - 1) as i32);
    let lim = b.max_s32(lim, 0i32);
    let lim = b.div_u32(lim, bn);
    let end = b.min_u32(n, lim);
    // first = floor(max(diag - left, 0) / block_n), at most end
    let lo = b.sub_s32(diag, w.left);
    let lo = b.max_s32(lo, 0i32);
    let first = b.div_u32(lo, bn);
    let first = b.min_u32(first, end);
    (first, end, diag)
}

/// Number of key blocks a query block visits (all, or up to the causal diagonal), and
/// `diag`: the last key the block's first query row sees.
pub fn kv_blocks(
    b: &mut Builder,
    plan: &KernelPlan,
    seqlen_q: Reg<B32>,
    seqlen_k: Reg<B32>,
    m0: Reg<B32>,
) -> (Reg<B32>, Reg<B32>) {
    let spec = &plan.spec;
    let t = &plan.tiles;
    let n = b.add_u32(seqlen_k, t.block_n() - 1);
    let n = b.div_u32(n, t.block_n());
    let diag = b.sub_s32(seqlen_k, seqlen_q);
    let diag = b.add_s32(diag, m0);
    if !spec.mask.is_causal() {
        return (n, diag);
    }
    let lim = b.add_s32(diag, (t.block_m() + t.block_n() - 1) as i32); // ceil((diag + block_m) / block_n)
    let lim = b.max_s32(lim, 0i32);
    let lim = b.div_u32(lim, t.block_n());
    (b.min_u32(n, lim), diag)
}

/// The key blocks a block of packed rows visits (packed rows `m0..m0 + block_m` of a KV
/// group: query position `row / heads_per_kv`, see [`crate::abi::decode`]), for a sequence
/// of `seqlen_k` keys whose last `seqlen_q` positions are the queries: all, or up to the
/// causal diagonal of its last position; and `diag`, the last key its first position sees.
pub fn packed_kv_blocks(
    b: &mut Builder,
    plan: &KernelPlan,
    (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
    m0: Reg<B32>,
    heads_per_kv: Reg<B32>,
) -> (Reg<B32>, Reg<B32>) {
    let t = &plan.tiles;
    let n = b.add_u32(seqlen_k, t.block_n() - 1);
    let n = b.div_u32(n, t.block_n());
    let shift = b.sub_s32(seqlen_k, seqlen_q);
    let first = b.div_u32(m0, heads_per_kv);
    let diag = b.add_s32(shift, first);
    if !plan.spec.mask.is_causal() {
        return (n, diag);
    }
    // the block's last position, in the sequence: keys 0..=last + shift are visible
    let last_row = b.add_u32(m0, t.block_m() - 1);
    let last = b.div_u32(last_row, heads_per_kv);
    let final_pos = b.sub_u32(seqlen_q, 1u32);
    let last = b.min_u32(last, final_pos);
    let lim = b.add_s32(last, shift);
    let lim = b.add_s32(lim, t.block_n() as i32); // ceil((last + shift + 1) / block_n)
    let lim = b.max_s32(lim, 0i32);
    let lim = b.div_u32(lim, t.block_n());
    (b.min_u32(n, lim), diag)
}

/// The key blocks a block of packed rows (as [`packed_kv_blocks`]) visits under the
/// sliding window `w`: from the one holding its first position's first visible key
/// (`diag - left`) to the one holding its last position's last visible key
/// (`last + shift + right`), within the sequence; `first == end` when it sees none.
/// Returns `(first, end, diag)`, `diag` as [`packed_kv_blocks`]'.
pub fn packed_window_blocks(
    b: &mut Builder,
    plan: &KernelPlan,
    w: Window,
    (seqlen_q, seqlen_k): (Reg<B32>, Reg<B32>),
    m0: Reg<B32>,
    heads_per_kv: Reg<B32>,
) -> (Reg<B32>, Reg<B32>, Reg<B32>) {
    let t = &plan.tiles;
    let bn = t.block_n();
    // (a local mask is not causal: every block of the sequence, and the diagonal)
    let (n, diag) = packed_kv_blocks(b, plan, (seqlen_q, seqlen_k), m0, heads_per_kv);
    // the block's last position: keys up to last + shift + right are visible to it
    let last_row = b.add_u32(m0, t.block_m() - 1);
    let last = b.div_u32(last_row, heads_per_kv);
    let final_pos = b.sub_u32(seqlen_q, 1u32);
    let last = b.min_u32(last, final_pos);
    let shift = b.sub_s32(seqlen_k, seqlen_q);
    // end = ceil((last + shift + right + 1) / block_n), within 0..=n
    let lim = b.add_s32(last, shift);
    let lim = b.add_s32(lim, w.right);
    let lim = b.add_s32(lim, bn as i32);
    let lim = b.max_s32(lim, 0i32);
    let lim = b.div_u32(lim, bn);
    let end = b.min_u32(n, lim);
    // first = floor(max(diag - left, 0) / block_n), at most end
    let lo = b.sub_s32(diag, w.left);
    let lo = b.max_s32(lo, 0i32);
    let first = b.div_u32(lo, bn);
    let first = b.min_u32(first, end);
    (first, end, diag)
}

/// The K and V bytes of the (head, batch) pairs whose query blocks run together in the
/// causal forward's order (see [`heaviest_first`]): what L2 should hold of them.
const KV_SECTION_BYTES: u32 = 32 << 20;

/// The causal forward's CTA order: (query block, head, batch) of this CTA. The hardware
/// hands out CTAs in the order x + nx (y + ny z); the CTA at place L of it works on the
/// L-th tile of this order: the (head, batch) pairs in sections whose K and V fit
/// `KV_SECTION_BYTES` (seqlen_k * d * 4 bytes a pair), and inside a section every
/// pair's heaviest query block (the last: it sees the most keys) before any lighter
/// one. Heavy tiles first leave light ones for the grid's tail; a section at a time
/// keeps the K and V its CTAs share in L2 (FA3's LPT scheduler; one section over the
/// whole grid loses that reuse and is slower). The grid's shape stays the ABI's
/// (ceil(sq / block_m), heads, batch).
pub fn heaviest_first(
    b: &mut Builder,
    plan: &KernelPlan,
    p: &Params,
) -> (Reg<B32>, Reg<B32>, Reg<B32>) {
    let spec = &plan.spec;
    let [x, y, z] = [Special::CtaIdX, Special::CtaIdY, Special::CtaIdZ].map(|s| b.special(s));
    let [nx, ny, nz] = [Special::NCtaIdX, Special::NCtaIdY, Special::NCtaIdZ].map(|s| b.special(s));
    let yz = b.mad_lo_u32(z, ny, y);
    let place = b.mad_lo_u32(yz, nx, x);
    let pairs = b.mul_lo_u32(ny, nz);
    // pairs per section: KV_SECTION_BYTES / (seqlen_k * 4 d), 1 to all of them (past 4M
    // keys the product wraps: that changes the section size, never the bijection)
    // (varlen: the grid's query rows, nx * block_m, stand for the keys of a pair)
    let keys = match p.packed() {
        Some(_) => b.mul_lo_u32(nx, plan.tiles.block_m()),
        None => p.get(SEQLEN_K),
    };
    let pair_bytes = b.mul_lo_u32(keys, 4 * spec.head_dim);
    let pair_bytes = b.max_u32(pair_bytes, 1u32);
    let per_section = b.div_u32(KV_SECTION_BYTES, pair_bytes);
    let per_section = b.max_u32(per_section, 1u32);
    let per_section = b.min_u32(per_section, pairs);
    let section_ctas = b.mul_lo_u32(per_section, nx);
    let section = b.div_u32(place, section_ctas);
    let first_pair = b.mul_lo_u32(section, per_section);
    let start = b.mul_lo_u32(section, section_ctas);
    let at = b.sub_u32(place, start);
    // the last section may hold fewer pairs
    let left = b.sub_u32(pairs, first_pair);
    let width = b.min_u32(per_section, left);
    let rank = b.div_u32(at, width);
    let pair = b.rem_u32(at, width);
    let pair = b.add_u32(first_pair, pair);
    let last = b.sub_u32(nx, 1u32);
    (
        b.sub_u32(last, rank),
        b.rem_u32(pair, ny),
        b.div_u32(pair, ny),
    )
}
