//! Kernel layer: the query-block skeleton shared by the forward and the deterministic dQ
//! pass: one CTA per (query block, head, batch), each warp owning `16 * m_tiles` query
//! rows, K/V blocks streamed by a [`BlockStream`](super::stream::BlockStream).

use std::ops::Deref;

use super::mask::KeyMask;
use super::params::Params;
use super::softmax::AccTiles;
use super::warp::Warp;
use crate::abi;
use crate::ptx::{B32, B64, Builder, Cmp, Param, Reg, Special};
use crate::spec::{KernelSpec, Pass};

/// The opening every query-block kernel shares: the builder with the kernel's `header`
/// comment, the parameters loaded, the CTA's [`QBlock`] and a zero register.
pub struct Opening {
    /// The kernel's builder.
    pub b: Builder,
    /// The IR parameters, for [`Builder::finish`].
    pub ir_params: Vec<Param>,
    /// The loaded parameters.
    pub p: Params,
    /// The CTA's query block and the warp's share.
    pub q: QBlock,
    /// `0u32`.
    pub zero: Reg<B32>,
}

/// Opens a query-block kernel (see [`Opening`]).
pub fn open(spec: &KernelSpec, header: String) -> Opening {
    let ir_params = abi::ir_params(spec.pass);
    let mut b = Builder::new();
    b.comment(header);
    let p = Params::load(&mut b, &ir_params);
    let q = QBlock::new(&mut b, spec, &p);
    let zero = b.mov(0u32);
    Opening {
        b,
        ir_params,
        p,
        q,
        zero,
    }
}

/// Per-CTA coordinates of a query-block kernel, plus its warp's share.
pub struct QBlock {
    /// The thread's warp and its rows.
    pub w: Warp,
    /// First query row of the block.
    pub m0: Reg<B32>,
    /// Query head of the CTA.
    pub head: Reg<B32>,
    /// Batch index of the CTA.
    pub batch: Reg<B32>,
    /// Key/value head the query head reads (`head / heads_per_kv`).
    pub kv_head: Reg<B32>,
    /// Query rows of this block that exist (`seqlen_q - m0`).
    pub q_rows: Reg<B32>,
}

impl Deref for QBlock {
    type Target = Warp;
    fn deref(&self) -> &Warp {
        &self.w
    }
}

impl QBlock {
    /// CTA coordinates from the grid, and the warp's share.
    pub fn new(b: &mut Builder, spec: &KernelSpec, p: &Params) -> Self {
        let t = spec.tiles();
        let w = if t.exchange {
            // the forward's exchange layout: 32-row blocks shared by groups of warps
            // (checked by `FwdExchange::new`)
            let rows = super::fwd_exchange::ROWS_PER_WARP;
            Warp::with_row_blocks(b, (rows / 16) as usize, Some(t.block_m / rows))
        } else {
            let m_tiles = (t.block_m / t.warps / 16) as usize;
            assert!(
                m_tiles >= 1 && t.block_m % (16 * t.warps) == 0,
                "generator bug: block_m {}",
                t.block_m
            );
            Warp::new(b, m_tiles)
        };
        let (m_block, head, batch) = if spec.causal && spec.pass == Pass::Fwd {
            heaviest_first(b, spec, p)
        } else {
            let m_block = b.special(Special::CtaIdX);
            // causal: the last query blocks see the most keys; launch them first, so the
            // light ones fill the tail of the grid
            let m_block = if spec.causal {
                let n = b.special(Special::NCtaIdX);
                let last = b.sub_u32(n, 1u32);
                b.sub_u32(last, m_block)
            } else {
                m_block
            };
            (
                m_block,
                b.special(Special::CtaIdY),
                b.special(Special::CtaIdZ),
            )
        };
        let m0 = b.mul_lo_u32(m_block, t.block_m);
        let kv_head = b.div_u32(head, p.u32("heads_per_kv"));
        let q_rows = b.sub_u32(p.u32("seqlen_q"), m0);
        QBlock {
            w,
            m0,
            head,
            batch,
            kv_head,
            q_rows,
        }
    }

    /// The key mask of the thread's rows.
    pub fn mask(
        &self,
        b: &mut Builder,
        causal: bool,
        seqlen_q: Reg<B32>,
        seqlen_k: Reg<B32>,
    ) -> KeyMask {
        let abs: Vec<Reg<B32>> = self.rows.iter().map(|&r| b.add_u32(r, self.m0)).collect();
        KeyMask::new(b, causal, &abs, self.t2, seqlen_q, seqlen_k)
    }

    /// Global address of `stat[batch, head, m0]` for a per-row f32 statistic laid out
    /// `[batch, heads, seqlen_q]` (the LSE, D) whose pointer is the parameter `name`.
    pub fn row_stats(&self, b: &mut Builder, p: &Params, name: &str, heads: Reg<B32>) -> Reg<B64> {
        row_stats_base(b, p, name, heads, self.batch, self.head, self.m0)
    }
}

/// The K and V bytes of the (head, batch) pairs whose query blocks run together in the
/// causal forward's order (see [`heaviest_first`]): what L2 should hold of them.
const KV_SECTION_BYTES: u32 = 32 << 20;

/// The causal forward's CTA order: (query block, head, batch) of this CTA. The hardware
/// hands out CTAs in the order x + nx (y + ny z); the CTA at place L of it works on the
/// L-th tile of this order: the (head, batch) pairs in sections whose K and V fit
/// [`KV_SECTION_BYTES`] (seqlen_k * d * 4 bytes a pair), and inside a section every
/// pair's heaviest query block (the last: it sees the most keys) before any lighter
/// one. Heavy tiles first leave light ones for the grid's tail; a section at a time
/// keeps the K and V its CTAs share in L2 (FA3's LPT scheduler; one section over the
/// whole grid measured 2-10% slower at d64 and d128 4K, session 7). The grid's shape
/// stays the ABI's (ceil(sq / block_m), heads, batch).
fn heaviest_first(
    b: &mut Builder,
    spec: &KernelSpec,
    p: &Params,
) -> (Reg<B32>, Reg<B32>, Reg<B32>) {
    let [x, y, z] = [Special::CtaIdX, Special::CtaIdY, Special::CtaIdZ].map(|s| b.special(s));
    let [nx, ny, nz] = [Special::NCtaIdX, Special::NCtaIdY, Special::NCtaIdZ].map(|s| b.special(s));
    let yz = b.mad_lo_u32(z, ny, y);
    let place = b.mad_lo_u32(yz, nx, x);
    let pairs = b.mul_lo_u32(ny, nz);
    // pairs per section: KV_SECTION_BYTES / (seqlen_k * 4 d), 1 to all of them (past 4M
    // keys the product wraps: that changes the section size, never the bijection)
    let pair_bytes = b.mul_lo_u32(p.u32("seqlen_k"), 4 * spec.head_dim);
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

/// Global address of `stat[batch, head, row0]` of a `[batch, heads, seqlen_q]` f32 array.
pub fn row_stats_base(
    b: &mut Builder,
    p: &Params,
    name: &str,
    heads: Reg<B32>,
    batch: Reg<B32>,
    head: Reg<B32>,
    row0: Reg<B32>,
) -> Reg<B64> {
    let bh = b.mad_lo_u32(batch, heads, head);
    let r = b.mul_wide_u32(bh, p.u32("seqlen_q"));
    let row0 = b.cvt_u64_u32(row0);
    let r = b.add_s64(r, row0);
    let bytes = b.shl_b64(r, 2);
    let base = b.cvta_global(p.u64(name));
    b.add_s64(base, bytes)
}

/// Number of key blocks a query block visits (all, or up to the causal diagonal), and
/// `diag`: the last key the block's first query row sees.
pub fn kv_blocks(
    b: &mut Builder,
    spec: &KernelSpec,
    seqlen_q: Reg<B32>,
    seqlen_k: Reg<B32>,
    m0: Reg<B32>,
) -> (Reg<B32>, Reg<B32>) {
    let t = spec.tiles();
    let n = b.add_u32(seqlen_k, t.block_n - 1);
    let n = b.div_u32(n, t.block_n);
    let diag = b.sub_s32(seqlen_k, seqlen_q);
    let diag = b.add_s32(diag, m0);
    if !spec.causal {
        return (n, diag);
    }
    let lim = b.add_s32(diag, (t.block_m + t.block_n - 1) as i32); // ceil((diag + block_m) / block_n)
    let lim = b.max_s32(lim, 0i32);
    let lim = b.div_u32(lim, t.block_n);
    (b.min_u32(n, lim), diag)
}

/// Masks `s` (scores of the key block at `n0`; the warp's columns start at key `s_n0`,
/// `n0` itself unless the block's keys are split between warps) when the block crosses
/// the sequence end or the causal diagonal; other blocks skip the mask with a uniform
/// branch.
#[allow(clippy::too_many_arguments)]
pub fn mask_block(
    b: &mut Builder,
    spec: &KernelSpec,
    mask: &KeyMask,
    s: &AccTiles,
    (n0, s_n0): (Reg<B32>, Reg<B32>),
    seqlen_k: Reg<B32>,
    diag: Reg<B32>,
) {
    let bn = spec.tiles().block_n;
    let end = b.add_u32(n0, bn);
    let needs_mask = b.setp_u32(Cmp::Gt, end, seqlen_k);
    let needs_mask = if spec.causal {
        let last = b.add_s32(n0, bn as i32 - 1);
        let crosses = b.setp_s32(Cmp::Gt, last, diag);
        b.or_pred(needs_mask, crosses)
    } else {
        needs_mask
    };
    let unmasked = b.label();
    b.bra_if(needs_mask, true, unmasked, true);
    mask.apply(b, s, s_n0);
    b.place(unmasked);
}
