//! Kernel layer: a [`BlockStream`]'s loop: the top of each iteration (wait, barrier,
//! prefetch), the late prefetch, the one-stage middle and the bottom.

use super::BlockStream;
use crate::ptx::{B32, B64, Builder, Cmp, Loop, Pred, Reg};

/// One emitted loop over a stream's blocks (a stream may be looped over more than once).
#[must_use = "a stream loop is closed with BlockStream::end"]
pub struct StreamLoop(Loop);

impl BlockStream {
    /// Top of iteration j: exits after the last block of `first..n_blocks`, waits for
    /// block j (operand 0) and a barrier, then fetches the next block, j+1 or (downward)
    /// j-1 (with one stage: operand 1 of block j). Returns (first row of block j, shared
    /// address the stage-0 tiles are relative to for block j).
    pub fn begin(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen: Reg<B32>,
        (first, n_blocks): (Reg<B32>, Reg<B32>),
    ) -> (Reg<B32>, Reg<B32>, StreamLoop) {
        b.comment("== loop over streamed blocks ==");
        let lp = b.loop_start();
        // (downward: j is -1 after block 0; block counts stay below 2^31)
        let more = self.in_range(b, self.j, (first, n_blocks));
        b.loop_exit_unless(&lp, more);
        if self.split() {
            b.comment("-- operand 0 of block j has landed; every warp is done with operand 1 --");
            b.cp_async_wait(0);
            b.bar_sync();
            b.comment("-- fetch operand 1 of block j --");
            self.issue(b, smem, self.j, seqlen, &[(1, self.next[1])]);
            b.cp_async_commit();
        } else {
            // One barrier per iteration: past it, block j is visible to every warp and
            // every warp is done with the block before it, whose stage the next block
            // (j+1, or downward j-1: the same stage parity) then reuses.
            b.comment("-- block j has landed; every warp is done with block j-1 --");
            b.cp_async_wait(self.ahead - 1);
            b.bar_sync();
            if self.ahead > 1 {
                self.fetch_ahead(b, smem, seqlen, (first, n_blocks));
            } else if !self.late {
                self.fetch_next(b, smem, seqlen, (first, n_blocks));
            }
        }
        let row0 = b.mul_lo_u32(self.j, self.rows);
        let stage_smem = self.stage_addr(b, smem, self.j);
        (row0, stage_smem, StreamLoop(lp))
    }

    /// Where a [`late_prefetch`](BlockStream::late_prefetch) stream fetches its next
    /// block: call it once per iteration, after `begin`; nothing for a stream whose
    /// `begin` fetched it.
    pub fn prefetch(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen: Reg<B32>,
        range: (Reg<B32>, Reg<B32>),
    ) {
        if self.late {
            self.fetch_next(b, smem, seqlen, range);
        }
    }

    /// Issues the next block into the stage of the previous one (every warp is done with
    /// it since `begin`'s barrier), when there is one.
    fn fetch_next(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen: Reg<B32>,
        range: (Reg<B32>, Reg<B32>),
    ) {
        b.comment("-- prefetch the next block into the stage of the previous one --");
        let j1 = self.next_block(b);
        let has_next = self.in_range(b, j1, range);
        let srcs = [(0, self.next[0]), (1, self.next[1])];
        self.issue_if(b, smem, seqlen, (j1, has_next), &srcs, None);
    }

    /// A [`deep`](BlockStream::deep) stream's remaining first blocks, after `start`'s
    /// block is committed: blocks `first + 1 .. first + stages - 1`, one commit group
    /// each (empty past `n_blocks`).
    pub fn start_ahead(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen: Reg<B32>,
        (first, n_blocks): (Reg<B32>, Reg<B32>),
    ) {
        for i in 1..self.ahead {
            let j = b.add_u32(first, i);
            self.issue_deep(b, smem, seqlen, (j, n_blocks));
        }
    }

    /// A deep stream's fetch at the top of iteration j: block `j + stages - 1` into the
    /// stage of block j-1 (every warp is done with it since the barrier).
    fn fetch_ahead(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen: Reg<B32>,
        (_, n_blocks): (Reg<B32>, Reg<B32>),
    ) {
        b.comment("-- prefetch block j + stages - 1 into the stage of block j-1 --");
        let j = b.add_u32(self.j, self.ahead);
        self.issue_deep(b, smem, seqlen, (j, n_blocks));
    }

    /// Issues block `j` (when below `n_blocks`) at the `next` addresses, moves them on
    /// by a block, and commits a group (empty without a block).
    fn issue_deep(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen: Reg<B32>,
        (j, n_blocks): (Reg<B32>, Reg<B32>),
    ) {
        let has = b.setp_u32(Cmp::Lt, j, n_blocks);
        let srcs = [(0, self.next[0]), (1, self.next[1])];
        b.if_uniform(has, |b| self.issue(b, smem, j, seqlen, &srcs));
        b.cp_async_commit();
        for i in 0..2 {
            let n = b.add_s64(self.next[i], self.step[i]);
            b.assign(self.next[i], n);
        }
    }

    /// Issues (and commits) block `j` of the operands `srcs` when `has`, with `what` as
    /// the comment over the copies.
    fn issue_if(
        &self,
        b: &mut Builder,
        smem: Reg<B32>,
        seqlen: Reg<B32>,
        (j, has): (Reg<B32>, Reg<Pred>),
        srcs: &[(usize, Reg<B64>)],
        what: Option<&str>,
    ) {
        b.if_uniform(has, |b| {
            if let Some(what) = what {
                b.comment(what);
            }
            self.issue(b, smem, j, seqlen, srcs);
            b.cp_async_commit();
        });
    }

    /// Between the product on operand 0 and the one on operand 1. With one stage: waits
    /// for operand 1 of block j and, once every warp is done with operand 0, fetches
    /// operand 0 of block j+1. No-op with more stages.
    pub fn mid(&self, b: &mut Builder, smem: Reg<B32>, seqlen: Reg<B32>, n_blocks: Reg<B32>) {
        if !self.split() {
            return;
        }
        b.comment("-- operand 1 of block j has landed; every warp is done with operand 0 --");
        b.cp_async_wait(0);
        b.bar_sync();
        let j1 = b.add_u32(self.j, 1u32);
        let has_next = b.setp_u32(Cmp::Lt, j1, n_blocks);
        let what = Some("-- fetch operand 0 of block j+1 --");
        self.issue_if(b, smem, seqlen, (j1, has_next), &[(0, self.next[0])], what);
    }

    /// Whether [`BlockStream::mid`] has a CTA barrier (one stage).
    pub fn syncs_mid(&self) -> bool {
        self.split()
    }

    /// The current block index (loop-carried; after the loop `n_blocks`, or downward
    /// `first - 1`).
    pub fn block(&self) -> Reg<B32> {
        self.j
    }

    /// The block after the current one in the stream's order.
    fn next_block(&self, b: &mut Builder) -> Reg<B32> {
        match self.down {
            true => b.sub_u32(self.j, 1u32),
            false => b.add_u32(self.j, 1u32),
        }
    }

    /// Whether block `j` is one of `first..n_blocks` (downward, only the lower bound can
    /// be crossed, as a signed compare: j reaches -1 when `first` is 0).
    fn in_range(
        &self,
        b: &mut Builder,
        j: Reg<B32>,
        (first, n_blocks): (Reg<B32>, Reg<B32>),
    ) -> Reg<Pred> {
        match self.down {
            true => b.setp_s32(Cmp::Ge, j, first),
            false => b.setp_u32(Cmp::Lt, j, n_blocks),
        }
    }

    /// The shared address of vector `i`'s current stage (element 0), valid inside the loop.
    pub fn vector_addr(&self, b: &mut Builder, smem: Reg<B32>, i: usize) -> Reg<B32> {
        let stage = b.and_b32(self.j, self.stages - 1);
        let off = b.mad_lo_u32(stage, self.rows * 4, self.vectors[i].base);
        b.add_u32(smem, off)
    }

    /// Bottom of the iteration: advance and loop (the next `begin`'s barrier orders this
    /// iteration's reads before the stage is refilled). After the loop every copy has
    /// landed; warps may still be reading the last stage, so a caller that `start`s
    /// again syncs first.
    pub fn end(&self, b: &mut Builder, lp: StreamLoop) {
        // (a deep stream moved its addresses on when it issued)
        for i in (0..2).filter(|_| self.ahead == 1) {
            let n = match self.down {
                true => b.sub_s64(self.next[i], self.step[i]),
                false => b.add_s64(self.next[i], self.step[i]),
            };
            b.assign(self.next[i], n);
        }
        let nj = self.next_block(b);
        b.assign(self.j, nj);
        b.loop_end(lp.0);
        b.cp_async_wait(0);
    }
}
