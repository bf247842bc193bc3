//! Kernel layer, sm_80 backward main pass: where a CTA finds which work it has.
//!
//! Today one CTA per (key block, kv head slot, batch) of the grid: `%ctaid.x` the key
//! block, `%ctaid.y` the kv head (times the group's splits, plus the split: see
//! [`KeyBlock::group_split`]), `%ctaid.z` the batch, and the grid's `y` and `z` extents
//! the slots and batches. Every phase reads them here, where it needs them, rather than
//! keeping them in registers through the loops (the d128 rows run at 248-255 registers):
//! the one place a persistent pass, whose CTAs walk several work items, would change
//! (docs/performance.md, Plan).

use super::KeyBlock;
use crate::ptx::{B32, Builder, Reg, Special};

impl KeyBlock<'_> {
    /// The work's key block (`%ctaid.x`).
    pub(super) fn work_key_block(b: &mut Builder) -> Reg<B32> {
        b.special(Special::CtaIdX)
    }

    /// The work's kv head slot: the kv head, times the split count, plus the split
    /// (`%ctaid.y`).
    pub(super) fn work_kv_slot(b: &mut Builder) -> Reg<B32> {
        b.special(Special::CtaIdY)
    }

    /// The work's batch (`%ctaid.z`).
    pub(super) fn work_batch(b: &mut Builder) -> Reg<B32> {
        b.special(Special::CtaIdZ)
    }

    /// How many kv head slots the call has (`%nctaid.y`): kv heads times the splits.
    pub(super) fn work_kv_slots(b: &mut Builder) -> Reg<B32> {
        b.special(Special::NCtaIdY)
    }

    /// How many batches the call has (`%nctaid.z`).
    pub(super) fn work_batches(b: &mut Builder) -> Reg<B32> {
        b.special(Special::NCtaIdZ)
    }
}
