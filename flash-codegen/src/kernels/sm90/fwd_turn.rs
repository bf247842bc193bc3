//! Kernel layer, sm_90a: the pingpong between the forward's consumer warpgroups (FA3's
//! scheduler barrier). Consumer `c` waits at named barrier `ISSUE_BAR + c` (with the
//! arrival of the consumer before it) to issue its products, then lets the next one go:
//! one warpgroup's products run on the tensor cores while the other's softmax runs.

use super::fwd_ctx::ISSUE_BAR;
use crate::ptx::{B32, Builder, Cmp, Reg};

/// Consumer warpgroup threads meeting at a turn's barrier: the one taking it and the
/// one that passed it.
const TURN_THREADS: u32 = 256;

/// A consumer's two barriers: its own (`mine`, waited at) and the next consumer's
/// (`next`, arrived at).
#[derive(Clone, Copy)]
pub(super) struct Turn {
    mine: Reg<B32>,
    next: Reg<B32>,
}

impl Turn {
    /// The barriers of consumer warpgroup `wg` (1..=consumers), in the pingpong's order;
    /// gives the first consumer its first turn. Once per CTA.
    pub(super) fn first(b: &mut Builder, wg: Reg<B32>, consumers: u32) -> Turn {
        let cw = b.sub_u32(wg, 1u32);
        let mine = b.add_u32(cw, ISSUE_BAR);
        let nx = b.add_u32(cw, 1u32);
        let wrap = b.setp_u32(Cmp::Eq, nx, consumers);
        let nx = b.selp_b32(0u32, nx, wrap);
        let next = b.add_u32(nx, ISSUE_BAR);
        let first = b.setp_u32(Cmp::Eq, cw, 0u32);
        b.when(first, false, |b| b.bar_arrive(mine, TURN_THREADS));
        Turn { mine, next }
    }

    /// Waits for this consumer's turn to issue.
    pub(super) fn take(&self, b: &mut Builder) {
        b.bar_sync_named(self.mine, TURN_THREADS);
    }

    /// Passes the turn to the next consumer.
    pub(super) fn pass(&self, b: &mut Builder) {
        b.bar_arrive(self.next, TURN_THREADS);
    }
}
