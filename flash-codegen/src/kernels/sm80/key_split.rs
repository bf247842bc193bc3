//! Kernel layer: the split-KV forward's key-split layout ([`Sm80Layout::KeySplit`]): every
//! warp of the CTA owns the same m16 tile of packed rows and takes its own `block_n /
//! warps` keys of each block, with its own online softmax (flash-decoding inside the
//! CTA). At the end the warps' states merge through shared memory (the K/V buffers, free
//! by then): each warp's reference max `m_w` and sum `l_w` per row give `M = max_w m_w`
//! and `L = sum_w l_w 2^(m_w - M)`; each warp scales its O by `2^(m_w - M)`, warps 1..
//! leave theirs in shared memory in register order (lane-major: conflict-free, and read
//! back by the same lane of warp 0), warp 0 adds them up and divides by `L`.
//!
//! [`Sm80Layout::KeySplit`]: crate::spec::Sm80Layout::KeySplit

use super::warp::Warp;
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::{Addr, B32, Builder, Cmp, F32, LdCache, Reg, Space, Ty};
use crate::spec::KernelPlan;
use crate::tile::acc::AccTile;
use crate::tile::smem::ROW_BYTES;

const NEG_INF: f32 = f32::NEG_INFINITY;
const LN_2: f32 = std::f32::consts::LN_2;

/// The warp's keys of each block: (shared offset of its first K/V row from the block's
/// tiles, its first key from the block's first).
pub fn warp_keys(b: &mut Builder, plan: &KernelPlan, w: &Warp) -> (Reg<B32>, Reg<B32>) {
    let key0 = b.mul_lo_u32(w.warp, keys_per_warp(plan));
    (b.mul_lo_u32(key0, ROW_BYTES), key0)
}

/// Keys of each block per warp.
pub fn keys_per_warp(plan: &KernelPlan) -> u32 {
    let t = plan.tiles.sm80();
    t.block_n / t.warps
}

/// Merges the warps' softmax states and O accumulators (see the module docs), at shared
/// address `smem` + `base` (the K/V buffers; every copy into them has landed). Returns each
/// thread row's natural-log LSE; O (normalised) and the LSE are meaningful in warp 0 only.
pub fn merge(
    b: &mut Builder,
    plan: &KernelPlan,
    w: &Warp,
    (smem, base): (Reg<B32>, u32),
    softmax: &OnlineSoftmax,
    o: &mut AccTile,
) -> Vec<Reg<F32>> {
    let warps = plan.tiles.warps();
    b.comment("-- merge the warps' states: M = max m_w, L = sum l_w 2^(m_w - M) --");
    let state = softmax.state(b);
    b.bar_sync(); // every warp is done with the last K/V block
    // statistics [warp][16 rows] of (m, l) pairs, then the O of warps 1.. in register order
    let stats = |b: &mut Builder, warp: Reg<B32>, row: Reg<B32>| {
        let at = b.mad_lo_u32(warp, 16, row);
        let at = b.mad_lo_u32(at, 8, smem);
        Addr::Shared(at, base as i32)
    };
    let quad0 = b.setp_u32(Cmp::Eq, w.t2, 0u32);
    for (r, &(m, l)) in state.iter().enumerate() {
        let at = stats(b, w.warp, w.rows[r]);
        b.when(quad0, false, |b| b.st(Space::Shared, Ty::F32, at, &[m, l]));
    }
    b.bar_sync();
    let mut whole = Vec::new();
    for (r, &(m_own, _)) in state.iter().enumerate() {
        let others: Vec<[Reg<F32>; 2]> = (0..warps)
            .map(|v| {
                let v = b.mov(v);
                let at = stats(b, v, w.rows[r]);
                b.ld(Space::Shared, LdCache::Default, Ty::F32, at)
            })
            .collect();
        let mx = others[1..]
            .iter()
            .fold(others[0][0], |a, x| b.max_f32(a, x[0]));
        let none = b.setp_f32(Cmp::Eq, mx, NEG_INF);
        let mx = b.selp_f32(0.0f32, mx, none);
        let neg = b.neg_f32(mx);
        let sum = others.iter().fold(None, |acc: Option<Reg<F32>>, x| {
            let e = b.add_f32(x[0], neg);
            let e = b.ex2(e);
            let t = b.mul_f32(x[1], e);
            Some(match acc {
                Some(a) => b.add_f32(a, t),
                None => t,
            })
        });
        let own = b.add_f32(m_own, neg);
        let own = b.ex2(own); // 0 for a warp that saw no key of the row
        o.scale_row(b, r, own);
        whole.push((mx, sum.expect("two or more warps")));
    }
    let regs: Vec<Reg<F32>> = o.regs().collect();
    let n = regs.len() as u32;
    let acc0 = base + 128 * warps;
    let lane4 = b.shl_b32(w.lane, 2u32);
    let lane_at = b.add_u32(smem, lane4);
    let first = b.setp_u32(Cmp::Eq, w.warp, 0u32);
    b.unless_uniform(first, |b| {
        let v = b.sub_u32(w.warp, 1u32); // warp v's accumulators at (v - 1) n * 128
        let at = b.mad_lo_u32(v, n * 128, lane_at);
        for (i, &x) in regs.iter().enumerate() {
            let imm = (acc0 + 128 * i as u32) as i32;
            b.st(Space::Shared, Ty::F32, Addr::Shared(at, imm), &[x]);
        }
    });
    b.bar_sync();
    b.if_uniform(first, |b| {
        for v in 1..warps {
            for (i, &x) in regs.iter().enumerate() {
                let imm = (acc0 + ((v - 1) * n + i as u32) * 128) as i32;
                let [y]: [Reg<F32>; 1] = b.ld(
                    Space::Shared,
                    LdCache::Default,
                    Ty::F32,
                    Addr::Shared(lane_at, imm),
                );
                let s = b.add_f32(x, y);
                b.assign(x, s);
            }
        }
    });
    b.comment("-- O /= L, lse = (M + log2 L) ln 2 (-inf, O = 0 for a row without a key) --");
    whole
        .iter()
        .enumerate()
        .map(|(r, &(mx, l))| {
            let empty = b.setp_f32(Cmp::Eq, l, 0.0f32);
            let inv = b.rcp(l);
            let inv = b.selp_f32(1.0f32, inv, empty);
            o.scale_row(b, r, inv);
            let lg = b.lg2(l);
            let lse = b.add_f32(mx, lg);
            let lse = b.mul_f32(lse, LN_2);
            b.selp_f32(NEG_INF, lse, empty)
        })
        .collect()
}
