//! Kernel layer: two operands (K and V, or Q and dO) streamed block by block through
//! `stages` shared-memory buffers with `cp.async`: block j+1 is in flight while block j
//! is computed. With one stage (the forward only) the operands take turns instead, as in
//! FA2: V_j loads while Q K_j^T runs, K_{j+1} while P V_j runs ([`BlockStream::mid`]).
//! The loop is emitted once; `start` may run several times (once per head in the
//! backward), re-pointing the stream at another tensor slice. A [`downward`] stream runs
//! its blocks from the last to the first (the backward's query blocks, as FA2 does).
//!
//! [`downward`]: BlockStream::downward

mod iter;
mod paged;

pub use iter::StreamLoop;
pub use paged::PagedRows;

use crate::abi::{HEAD_DIM, TensorArgs};
use crate::kernels::params::Params;
use crate::ptx::inst::CpSize;
use crate::ptx::{Addr, B32, B64, Builder, Cmp, Reg};
use crate::spec::{KernelPlan, StreamRegion};
use crate::tile::copy::TileCopy;
use crate::tile::smem::SmemTile;

/// Two operands streamed block by block (see the module docs).
pub struct BlockStream {
    /// The copies planned once ([`CopyPlan::Once`]), or `None`: planned at each issue.
    copies: Option<[TileCopy; 2]>,
    /// `%tid.x` (with [`CopyPlan::AtIssue`] read again at each issue).
    tid: Reg<B32>,
    /// Row stride registers of the two operands and the problem's head dim.
    strides: [Reg<B32>; 2],
    head_dim: Reg<B32>,
    /// The kernel's head dim and threads per CTA.
    d: u32,
    threads: u32,
    /// Stage-0 tiles of the two operands; stage s sits `s * stage_bytes` further.
    pub tiles: [SmemTile; 2],
    stage_bytes: u32,
    stages: u32,
    rows: u32,
    /// Byte distance between successive blocks of each operand.
    step: [Reg<B64>; 2],
    /// Global address of the next block to fetch (loop-carried); with one stage, operand
    /// 1's is that of the current block (it is fetched inside the iteration).
    next: [Reg<B64>; 2],
    /// Current block index (loop-carried).
    j: Reg<B32>,
    /// Blocks run from the last to the first.
    down: bool,
    /// The next block is fetched by an explicit [`BlockStream::prefetch`], not by `begin`.
    late: bool,
    /// Blocks in flight ahead of the one computed: 1, or `stages - 1` for a
    /// [`deep`](BlockStream::deep) stream.
    ahead: u32,
    /// Per-row f32 vectors streamed with the tiles (e.g. LSE and D of each query row).
    vectors: Vec<VecCopy>,
    /// Where the buffers sit.
    region: StreamRegion,
    /// The operands' rows looked up in a page table ([`BlockStream::paged`]), or `None`:
    /// consecutive rows from the block's address.
    pages: Option<PagedRows>,
}

/// When a stream plans its per-thread copy offsets ([`TileCopy`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CopyPlan {
    /// Once, before the loop: the offsets stay live in registers through it.
    Once,
    /// At every issue, from `%tid` and the parameters: a few more instructions per
    /// block, ~8 registers fewer through the loop (the d128 backward needs them for its
    /// one-piece dP^T).
    AtIssue,
}

/// A per-row f32 vector streamed block by block: thread `tid < rows` copies element
/// `tid` (4-byte `cp.async`, zero past the sequence end).
pub struct VecCopy {
    /// Byte offset of stage 0 in shared memory; stage s sits `s * rows * 4` further.
    pub base: u32,
    /// Global byte address of element 0 of the current slice.
    src: Reg<B64>,
}

impl BlockStream {
    /// Plans the copies of the blocks of two operands (`operands`: their tensors, for the
    /// row strides) into the plan's stream region.
    pub fn new(
        b: &mut Builder,
        plan: &KernelPlan,
        p: &Params,
        (tid, copy_plan): (Reg<B32>, CopyPlan),
        operands: [&TensorArgs; 2],
    ) -> Self {
        let t = plan.tiles.sm80();
        let region = plan
            .smem
            .stream
            .expect("generator bug: a stream without its region");
        let (d, rows) = (plan.spec.head_dim, region.rows);
        let stage_bytes = region.stage_bytes();
        let tiles = [0, 1].map(|i| SmemTile::from(region.tile(i)));
        let head_dim = p.get(HEAD_DIM);
        let strides = operands.map(|t| p.row_stride(t));
        let copies = (copy_plan == CopyPlan::Once).then(|| {
            [0, 1].map(|i| TileCopy::new(b, &tiles[i], d, t.threads(), tid, strides[i], head_dim))
        });
        let step = strides.map(|s| {
            let x = b.mul_wide_u32(s, rows);
            b.add_s64(x, x)
        });
        let next = [b.mov(0i64), b.mov(0i64)];
        let j = b.mov(0u32);
        BlockStream {
            copies,
            tid,
            strides,
            head_dim,
            d,
            threads: t.threads(),
            tiles,
            stage_bytes,
            stages: region.stages,
            rows,
            region,
            step,
            next,
            j,
            down: false,
            late: false,
            ahead: 1,
            vectors: vec![],
            pages: None,
        }
    }

    /// The same stream reading its rows through a page table: block `j`'s row `r` is key
    /// `j * rows + r` of the sequence, wherever `pages` puts it (the addresses given to
    /// `start` are then unused).
    /// `pages` must be planned from this stream's copies ([`BlockStream::planned_copy`]).
    pub fn paged(self, pages: PagedRows) -> Self {
        assert!(
            self.vectors.is_empty() && !self.split() && !self.down && self.copies.is_some(),
            "generator bug: a paged stream runs upward on two or more stages, without \
             vectors, its copies planned once"
        );
        BlockStream {
            pages: Some(pages),
            ..self
        }
    }

    /// Operand 0's copies, planned once (`None` with [`CopyPlan::AtIssue`]): what a
    /// [`PagedRows`] for this stream is planned from.
    pub fn planned_copy(&self) -> Option<&TileCopy> {
        self.copy(0)
    }

    /// Rows per block.
    pub fn block_rows(&self) -> u32 {
        self.rows
    }

    /// The same stream running its blocks from the last to the first (two or more
    /// stages). In the causal backward, every key block's CTA then starts at the last
    /// query block and works down to its diagonal, so the CTAs running together read the
    /// same Q and dO blocks and add into the same dQ rows at about the same time.
    pub fn downward(self) -> Self {
        assert!(
            !self.split(),
            "generator bug: a one-stage stream runs upward"
        );
        BlockStream { down: true, ..self }
    }

    /// The same stream, its next block fetched where the kernel calls
    /// [`BlockStream::prefetch`] (two or more stages) instead of right after `begin`'s
    /// barrier, e.g. after a first product, away from a burst of atomics at the end of the
    /// previous iteration that would hold the copies in the memory queue.
    pub fn late_prefetch(self) -> Self {
        assert!(
            !self.split(),
            "generator bug: a one-stage stream fetches in mid"
        );
        BlockStream { late: true, ..self }
    }

    /// The same stream keeping `stages - 1` blocks in flight ahead of the one computed
    /// (two or more stages, upward): every issue is its own commit group (empty past the
    /// last block, so that `begin` can wait for all but the newest `stages - 2`). The
    /// kernel calls [`BlockStream::start_ahead`] after committing `start`'s block. For a
    /// CTA streaming a long key range alone (the split-KV forward), whose time per block
    /// is otherwise one memory round trip.
    pub fn deep(self) -> Self {
        assert!(
            !self.split() && !self.down && !self.late && self.vectors.is_empty(),
            "generator bug: a deep stream runs upward on two or more stages"
        );
        BlockStream {
            ahead: self.stages - 1,
            ..self
        }
    }

    /// Adds `n` per-row f32 vectors after the tiles ([`BlockStream::vector_addr`] finds
    /// them inside the loop); their sources are set by [`BlockStream::start_vectors`].
    pub fn with_vectors(mut self, b: &mut Builder, n: usize) -> Self {
        assert_eq!(
            n as u32, self.region.vectors,
            "generator bug: vectors of the region"
        );
        for i in 0..n as u32 {
            self.vectors.push(VecCopy {
                base: self.region.vector(i),
                src: b.mov(0i64),
            });
        }
        self
    }

    /// Points the vectors at their element-0 global addresses (before `start`).
    pub fn start_vectors(&self, b: &mut Builder, srcs: &[Reg<B64>]) {
        assert_eq!(
            srcs.len(),
            self.vectors.len(),
            "generator bug: vector sources"
        );
        for (v, s) in self.vectors.iter().zip(srcs) {
            b.assign(v.src, *s);
        }
    }

    /// Points the stream at operands whose row 0 is at `bases`, to run blocks
    /// `first..n_blocks` of a sequence of `seqlen` rows; issues the first block to run
    /// (`first`, or `n_blocks - 1` downward) when there is one (with one stage: operand 0
    /// only). The caller commits the group.
    pub fn start(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        bases: [Reg<B64>; 2],
        first: Reg<B32>,
        seqlen: Reg<B32>,
        n_blocks: Reg<B32>,
    ) {
        let j0 = if self.down {
            b.sub_u32(n_blocks, 1u32)
        } else {
            first
        };
        b.assign(self.j, j0);
        let j0_64 = b.cvt_u64_u32(j0);
        let mut cur = Vec::new();
        for (i, ((base, step), next)) in bases.iter().zip(self.step).zip(self.next).enumerate() {
            let off = b.mul_lo_u64(j0_64, step);
            let c = b.add_s64(*base, off);
            let nxt = if self.split() && i == 1 {
                c
            } else if self.down {
                b.sub_s64(c, step)
            } else {
                b.add_s64(c, step)
            };
            b.assign(next, nxt);
            cur.push((i, c));
        }
        if self.split() {
            cur.truncate(1);
        }
        let has_blocks = b.setp_u32(Cmp::Lt, first, n_blocks);
        b.if_uniform(has_blocks, |b| {
            if let (Some(pages), Some(copy)) = (&self.pages, self.copy(0)) {
                // the first block's table entries
                let row0 = b.mul_lo_u32(j0, self.rows);
                pages.start(b, copy, row0);
            }
            self.issue(b, smem, j0, seqlen, &cur)
        });
    }

    /// Operand `i`'s copies, planned once (`None` with [`CopyPlan::AtIssue`]).
    fn copy(&self, i: usize) -> Option<&TileCopy> {
        self.copies.as_ref().map(|c| &c[i])
    }

    /// One buffer per operand, taking turns (see the module docs).
    fn split(&self) -> bool {
        self.stages == 1
    }

    /// Issues block `j` of the operands `srcs` (operand index, global address of the
    /// block), and of the vectors.
    fn issue(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        j: Reg<B32>,
        seqlen: Reg<B32>,
        srcs: &[(usize, Reg<B64>)],
    ) {
        let stage_smem = self.stage_addr(b, smem, j);
        let tid = match self.copies {
            Some(_) => self.tid,
            None => b.special(crate::ptx::Special::TidX), // not kept live through the loop
        };
        let row0 = b.mul_lo_u32(j, self.rows);
        let rows_left = b.sub_u32(seqlen, row0);
        if let (Some(pages), Some([c0, c1])) = (&self.pages, &self.copies) {
            // paged: both operands (their tiles have one shape) through the table
            let bases = [self.tiles[0].base, self.tiles[1].base];
            pages.issue(b, [c0, c1], (stage_smem, bases), row0, rows_left);
            return;
        }
        for &(i, src) in srcs {
            let at_issue;
            let copy = match &self.copies {
                Some(c) => &c[i],
                None => {
                    at_issue = TileCopy::new(
                        b,
                        &self.tiles[i],
                        self.d,
                        self.threads,
                        tid,
                        self.strides[i],
                        self.head_dim,
                    );
                    &at_issue
                }
            };
            copy.issue(b, stage_smem, self.tiles[i].base, src, rows_left);
        }
        if !self.vectors.is_empty() {
            let in_block = b.setp_u32(Cmp::Lt, tid, self.rows);
            let valid = b.setp_s32(Cmp::Lt, tid, rows_left);
            let ok = b.and_pred(in_block, valid);
            let size = b.selp_b32(4u32, 0u32, ok);
            let elem = b.add_u32(row0, tid);
            let elem = b.selp_b32(elem, 0u32, ok);
            let stage = b.and_b32(j, self.stages - 1);
            let vec_off = b.shl_b32(tid, 2u32);
            let vec_off = b.mad_lo_u32(stage, self.rows * 4, vec_off);
            let dst_base = b.add_u32(smem, vec_off);
            for v in &self.vectors {
                let src = b.mad_wide_u32(elem, 4u32, v.src);
                let dst = Addr::Shared(dst_base, v.base as i32);
                b.when(in_block, false, |b| {
                    b.cp_async(CpSize::B4, dst, Addr::Global(src, 0), Some(size.into()))
                });
            }
        }
    }

    fn stage_addr(&self, b: &mut Builder, smem: Reg<B32>, j: Reg<B32>) -> Reg<B32> {
        let stage = b.and_b32(j, self.stages - 1);
        let off = b.mul_lo_u32(stage, self.stage_bytes);
        b.add_u32(smem, off)
    }
}
