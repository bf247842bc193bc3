//! Kernel layer: the query-block skeleton shared by the forward and the deterministic dQ
//! pass: one CTA per (query block, head, batch), each warp owning `16 * m_tiles` query
//! rows, K/V blocks streamed through `stages` shared-memory buffers with `cp.async`
//! (block j+1 in flight while block j is computed), and the tile products of FA2.

use super::mask::KeyMask;
use super::params::Params;
use super::softmax::{AccTiles, zeros};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, HalfFmt, Label, Reg, Space, Special, Ty};
use crate::spec::KernelSpec;
use crate::tile::copy::TileCopy;
use crate::tile::frag::{LDM_A, LDM_B_KN_TRANS, LDM_B_NK, c_frag};
use crate::tile::smem::{LdmLanes, ROW_BYTES, SmemTile};

/// Per-CTA and per-thread coordinates of a query-block kernel.
pub struct QBlock {
    pub tid: Reg<B32>,
    pub lane: Reg<B32>,
    pub m0: Reg<B32>,
    pub head: Reg<B32>,
    pub batch: Reg<B32>,
    pub kv_head: Reg<B32>,
    /// Query rows of this block that exist (`seqlen_q - m0`).
    pub q_rows: Reg<B32>,
    pub m_tiles: usize,
    /// First row of the warp inside the block (`16 * m_tiles * warp`).
    pub warp_row: Reg<B32>,
    /// The thread's rows inside the block (`2 * mt + h` -> row g + 8h of m-tile mt).
    pub rows: Vec<Reg<B32>>,
    /// `2 * (lane & 3)`: the first accumulator column of the thread.
    pub t2: Reg<B32>,
    pub a_lanes: LdmLanes,
    pub bt_lanes: LdmLanes,
    pub b_lanes: LdmLanes,
}

impl QBlock {
    pub fn new(b: &mut Builder, spec: &KernelSpec, p: &Params) -> Self {
        let t = spec.tiles();
        let m_tiles = (t.block_m / t.warps / 16) as usize;
        assert!(
            m_tiles >= 1 && t.block_m % (16 * t.warps) == 0,
            "generator bug: block_m {}",
            t.block_m
        );
        let tid = b.special(Special::TidX);
        let lane = b.and_b32(tid, 31u32);
        let warp = b.shr_u32(tid, 5u32);
        let m_block = b.special(Special::CtaIdX);
        let head = b.special(Special::CtaIdY);
        let batch = b.special(Special::CtaIdZ);
        let m0 = b.mul_lo_u32(m_block, t.block_m);
        let kv_head = b.div_u32(head, p.u32("heads_per_kv"));
        let q_rows = b.sub_u32(p.u32("seqlen_q"), m0);
        let t2 = c_frag(0).col.emit(b, lane);
        let g = c_frag(0).row.emit(b, lane);
        let warp_row = b.mul_lo_u32(warp, 16 * m_tiles as u32);
        let rows = (0..m_tiles as u32)
            .flat_map(|mt| [0u32, 8].map(|h| 16 * mt + h))
            .map(|off| {
                let r = b.add_u32(warp_row, g);
                b.add_u32(r, off)
            })
            .collect();
        let a_lanes = LdmLanes::new(b, &LDM_A, lane);
        let bt_lanes = LdmLanes::new(b, &LDM_B_NK, lane);
        let b_lanes = LdmLanes::new(b, &LDM_B_KN_TRANS, lane);
        QBlock {
            tid,
            lane,
            m0,
            head,
            batch,
            kv_head,
            q_rows,
            m_tiles,
            warp_row,
            rows,
            t2,
            a_lanes,
            bt_lanes,
            b_lanes,
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

    /// `acc[mt][nt] += A[warp rows][k] * B[n][k]^T`: A from `a_tile` (the warp's rows),
    /// B from `b_tile` at shared address `b_smem` (K in Q K^T, V in dO V^T); contraction
    /// over `k_dim` columns.
    pub fn mma_a_bt(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTiles,
        a: (&SmemTile, Reg<B32>),
        bt: (&SmemTile, Reg<B32>),
        k_dim: u32,
    ) {
        let n_tiles = acc[0].len() as u32;
        let wr = b.mul_lo_u32(self.warp_row, ROW_BYTES);
        let a_base = b.add_u32(a.1, wr);
        for kk in 0..k_dim / 16 {
            let af: Vec<[Reg<B32>; 4]> = (0..self.m_tiles)
                .map(|mt| {
                    let addr = self.a_lanes.addr(b, a_base, a.0, 16 * mt as u32, 2 * kk);
                    b.ldmatrix::<4>(false, addr)
                })
                .collect();
            for np in 0..n_tiles / 2 {
                let addr = self.bt_lanes.addr(b, bt.1, bt.0, 16 * np, 2 * kk);
                let bf = b.ldmatrix::<4>(false, addr);
                for (mt, a_mt) in af.iter().enumerate() {
                    b.mma(fmt, acc[mt][2 * np as usize], *a_mt, [bf[0], bf[1]]);
                    b.mma(fmt, acc[mt][2 * np as usize + 1], *a_mt, [bf[2], bf[3]]);
                }
            }
        }
    }

    /// `acc[nt] += A * B[k][n]`: A fragments from registers (one per k16 step, e.g. P or
    /// dS converted in place), B from `b_tile` [k][n] at `b_smem` via `ldmatrix.trans`.
    pub fn mma_a_b(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &[[Reg<crate::ptx::F32>; 4]],
        a: &[[Reg<B32>; 4]],
        b_tile: (&SmemTile, Reg<B32>),
    ) {
        for (kk, af) in a.iter().enumerate() {
            for np in 0..acc.len() as u32 / 2 {
                let addr = self
                    .b_lanes
                    .addr(b, b_tile.1, b_tile.0, 16 * kk as u32, 2 * np);
                let bf = b.ldmatrix::<4>(true, addr);
                b.mma(fmt, acc[2 * np as usize], *af, [bf[0], bf[1]]);
                b.mma(fmt, acc[2 * np as usize + 1], *af, [bf[2], bf[3]]);
            }
        }
    }

    /// Global address of `stat[batch, head, m0]` for a per-row f32 statistic laid out
    /// `[batch, heads, seqlen_q]` (the LSE, D) whose pointer is the parameter `name`.
    pub fn row_stats(&self, b: &mut Builder, p: &Params, name: &str, heads: Reg<B32>) -> Reg<B64> {
        let bh = b.mad_lo_u32(self.batch, heads, self.head);
        let row0 = b.mul_wide_u32(bh, p.u32("seqlen_q"));
        let m0 = b.cvt_u64_u32(self.m0);
        let row0 = b.add_s64(row0, m0);
        let bytes = b.shl_b64(row0, 2);
        let base = b.cvta_global(p.u64(name));
        b.add_s64(base, bytes)
    }

    /// Stores accumulator rows (converted to `fmt`) to `base + row * row_stride` for rows
    /// below `q_rows` and head-dim columns below `head_dim`.
    pub fn store_rows(
        &self,
        b: &mut Builder,
        fmt: HalfFmt,
        acc: &AccTiles,
        base: Reg<B64>,
        row_stride: Reg<B32>,
        head_dim: Reg<B32>,
    ) {
        let row_bytes = b.shl_b32(row_stride, 1u32);
        let col_bytes = b.shl_b32(self.t2, 1u32);
        let col_bytes = b.cvt_u64_u32(col_bytes);
        for (r, &row) in self.rows.iter().enumerate() {
            let (mt, h) = (r / 2, r % 2);
            let row_ok = b.setp_s32(Cmp::Lt, row, self.q_rows);
            let addr = b.mad_wide_u32(row, row_bytes, col_bytes);
            let addr = b.add_s64(base, addr);
            for (dt, frag) in acc[mt].iter().enumerate() {
                let col_ok = b.setp_u32(Cmp::Lt, 8 * dt as u32, head_dim);
                let ok = b.and_pred(row_ok, col_ok);
                let packed = b.pack(fmt, frag[2 * h], frag[2 * h + 1]);
                b.when(ok, false, |b| {
                    b.st(
                        Space::Global,
                        Ty::B32,
                        Addr::Global(addr, 16 * dt as i32),
                        &[packed],
                    )
                });
            }
        }
    }
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

/// Masks `s` (scores of the key block at `n0`) when the block crosses the sequence end
/// or the causal diagonal; other blocks skip the mask with a uniform branch.
#[allow(clippy::too_many_arguments)]
pub fn mask_block(
    b: &mut Builder,
    spec: &KernelSpec,
    mask: &KeyMask,
    s: &AccTiles,
    n0: Reg<B32>,
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
    mask.apply(b, s, n0);
    b.place(unmasked);
}

/// K and V blocks streamed through `stages` shared-memory buffers.
pub struct KvStream {
    k_copy: TileCopy,
    v_copy: TileCopy,
    /// Stage-0 tiles; stage s sits `s * stage_bytes` further.
    pub k_tile: SmemTile,
    pub v_tile: SmemTile,
    stage_bytes: u32,
    stages: u32,
    block_n: u32,
    base: (Reg<B64>, Reg<B64>),
    next: (Reg<B64>, Reg<B64>),
    step: (Reg<B64>, Reg<B64>),
    j: Reg<B32>,
    top: Label,
    done: Label,
}

impl KvStream {
    /// Plans the copies of K and V (element-tensor bases `k_base`, `v_base`) into
    /// `stages` buffers of each starting at shared byte `smem_base`.
    pub fn new(
        b: &mut Builder,
        spec: &KernelSpec,
        p: &Params,
        q: &QBlock,
        smem_base: u32,
        k_base: Reg<B64>,
        v_base: Reg<B64>,
    ) -> Self {
        let t = spec.tiles();
        let (d, dp) = (spec.head_dim, spec.smem_head_dim());
        let stage_bytes = SmemTile::new(0, t.block_n, dp).bytes();
        let k_tile = SmemTile::new(smem_base, t.block_n, dp);
        let v_tile = SmemTile::new(smem_base + t.stages * stage_bytes, t.block_n, dp);
        let head_dim = p.u32("head_dim");
        let k_copy = TileCopy::new(
            b,
            &k_tile,
            d,
            t.threads(),
            q.tid,
            p.u32("k_row_stride"),
            head_dim,
        );
        let v_copy = TileCopy::new(
            b,
            &v_tile,
            d,
            t.threads(),
            q.tid,
            p.u32("v_row_stride"),
            head_dim,
        );
        let step_of = |b: &mut Builder, stride: Reg<B32>| {
            let s = b.mul_wide_u32(stride, t.block_n);
            b.add_s64(s, s)
        };
        let step = (
            step_of(b, p.u32("k_row_stride")),
            step_of(b, p.u32("v_row_stride")),
        );
        let next = (b.add_s64(k_base, step.0), b.add_s64(v_base, step.1));
        let j = b.mov(0u32);
        let (top, done) = (b.label(), b.label());
        KvStream {
            k_copy,
            v_copy,
            k_tile,
            v_tile,
            stage_bytes,
            stages: t.stages,
            block_n: t.block_n,
            base: (k_base, v_base),
            next,
            step,
            j,
            top,
            done,
        }
    }

    /// Shared-memory bytes of all K and V buffers.
    pub fn bytes(&self) -> u32 {
        2 * self.stages * self.stage_bytes
    }

    /// Issues block 0 (when there is one); the caller commits the group.
    pub fn issue_first(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen_k: Reg<B32>,
        n_blocks: Reg<B32>,
    ) {
        let has_blocks = b.setp_u32(Cmp::Gt, n_blocks, 0u32);
        let none = b.label();
        b.bra_if(has_blocks, true, none, true);
        self.k_copy
            .issue(b, smem, self.k_tile.base, self.base.0, seqlen_k);
        self.v_copy
            .issue(b, smem, self.v_tile.base, self.base.1, seqlen_k);
        b.place(none);
    }

    /// Top of iteration j: exits after the last block, prefetches block j+1, waits for
    /// block j. Returns (n0, shared address the stage-0 tiles are relative to).
    pub fn begin(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen_k: Reg<B32>,
        n_blocks: Reg<B32>,
    ) -> (Reg<B32>, Reg<B32>) {
        b.comment("== main loop over key/value blocks ==");
        b.place(self.top);
        let more = b.setp_u32(Cmp::Lt, self.j, n_blocks);
        b.bra_if(more, true, self.done, true);
        let n0 = b.mul_lo_u32(self.j, self.block_n);
        b.comment("-- prefetch block j+1 into the next stage --");
        let j1 = b.add_u32(self.j, 1u32);
        let has_next = b.setp_u32(Cmp::Lt, j1, n_blocks);
        let no_next = b.label();
        b.bra_if(has_next, true, no_next, true);
        let next_smem = self.stage_addr(b, smem, j1);
        let n1 = b.add_u32(n0, self.block_n);
        let rows_left = b.sub_u32(seqlen_k, n1);
        self.k_copy
            .issue(b, next_smem, self.k_tile.base, self.next.0, rows_left);
        self.v_copy
            .issue(b, next_smem, self.v_tile.base, self.next.1, rows_left);
        b.place(no_next);
        b.cp_async_commit();
        b.cp_async_wait(1);
        b.bar_sync();
        let kv_smem = self.stage_addr(b, smem, self.j);
        (n0, kv_smem)
    }

    fn stage_addr(&self, b: &mut Builder, smem: Reg<B32>, j: Reg<B32>) -> Reg<B32> {
        let stage = b.and_b32(j, self.stages - 1);
        let off = b.mul_lo_u32(stage, self.stage_bytes);
        b.add_u32(smem, off)
    }

    /// Bottom of the iteration: every warp is done with the stage, advance, loop.
    pub fn end(&self, b: &mut Builder) {
        b.bar_sync();
        let nk = b.add_s64(self.next.0, self.step.0);
        b.assign(self.next.0, nk);
        let nv = b.add_s64(self.next.1, self.step.1);
        b.assign(self.next.1, nv);
        let nj = b.add_u32(self.j, 1u32);
        b.assign(self.j, nj);
        b.bra(self.top, true);
        b.place(self.done);
        b.cp_async_wait(0);
    }
}

/// Fresh zero accumulators of `n_cols` columns for the warp's m-tiles.
pub fn acc_zeros(b: &mut Builder, q: &QBlock, n_cols: u32) -> AccTiles {
    zeros(b, q.m_tiles, (n_cols / 8) as usize)
}
