//! Kernel layer: the query-block skeleton shared by the forward and the deterministic dQ
//! pass: one CTA per (query block, head, batch), each warp owning `16 * m_tiles` query
//! rows, K/V blocks streamed by a [`BlockStream`](super::stream::BlockStream).

use std::ops::Deref;

use super::warp::Warp;
use crate::abi::{Arg, HEADS_PER_KV};
use crate::kernels::mask::{KeyMask, KeyRule};
use crate::kernels::params::Params;
use crate::kernels::params::row_stats_base;
use crate::kernels::schedule::heaviest_first;
use crate::kernels::varlen::Packed;
use crate::ptx::{B32, B64, Builder, Reg, Special};
use crate::spec::{KernelPlan, Pass};

/// The opening every query-block kernel shares: the builder with the kernel's `header`
/// comment, the parameters loaded, the CTA's [`QBlock`] and a zero register.
pub struct Opening {
    /// The kernel's builder.
    pub b: Builder,
    /// The loaded parameters.
    pub p: Params,
    /// The CTA's query block and the warp's share.
    pub q: QBlock,
    /// `0u32`.
    pub zero: Reg<B32>,
}

/// Opens a query-block kernel (see [`Opening`]).
pub fn open(plan: &KernelPlan, header: String) -> Opening {
    let spec = &plan.spec;
    let mut b = Builder::new();
    b.comment(header);
    let mut p = Params::load_spec(&mut b, spec);
    let q = QBlock::new(&mut b, plan, &mut p);
    let zero = b.mov(0u32);
    Opening { b, p, q, zero }
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
    pub fn new(b: &mut Builder, plan: &KernelPlan, p: &mut Params) -> Self {
        let spec = &plan.spec;
        let t = plan.tiles.sm80();
        let w = if t.layout.exchange() {
            // the forward's exchange layout: 32-row blocks shared by groups of warps
            // (checked by `Sm80Tiles::check`)
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
        let (m_block, head, batch) = if spec.mask.is_causal() && spec.pass.tile_pass() == Pass::Fwd
        {
            // (varlen: the sequence is the remapped batch)
            let (m, h, z) = heaviest_first(b, plan, p);
            p.set_sequence(z);
            (m, h, z)
        } else {
            let m_block = b.special(Special::CtaIdX);
            // causal: the last query blocks see the most keys; launch them first, so the
            // light ones fill the tail of the grid
            let m_block = if spec.mask.is_causal() {
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
        let kv_head = b.div_u32(head, p.get(HEADS_PER_KV));
        let seqlen_q = p.seqlen_q(b);
        if p.packed().is_some() {
            Packed::exit_past(b, m0, seqlen_q);
        }
        let q_rows = b.sub_u32(seqlen_q, m0);
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
        rule: KeyRule,
        seqlen_q: Reg<B32>,
        seqlen_k: Reg<B32>,
    ) -> KeyMask {
        let abs: Vec<Reg<B32>> = self.rows.iter().map(|&r| b.add_u32(r, self.m0)).collect();
        KeyMask::new(b, rule, &abs, self.t2, seqlen_q, seqlen_k)
    }

    /// Global address of `stat[batch, head, m0]` for a per-row f32 statistic laid out
    /// `[batch, heads, seqlen_q]` (the LSE, D) whose pointer is the parameter `name`.
    pub fn row_stats(
        &self,
        b: &mut Builder,
        p: &Params,
        stat: Arg<B64>,
        heads: Reg<B32>,
    ) -> Reg<B64> {
        row_stats_base(b, p, stat, heads, self.batch, self.head, self.m0)
    }
}
