//! Kernel layer, sm_90a: the forward's producer thread (see `fwd`): per tile, Q into its
//! slot, then K and V of every key block into the rings, each a TMA load completing on its
//! full barrier; after the last tile, the drain.

use super::fwd_ctx::{
    BLOCK_N, Ctx, K_EMPTY, K_FULL, Q_FULL, QSlot, STAGES, Stage, V_EMPTY, V_FULL,
};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, Operand, Reg};
use crate::tile::smem::ROW_BYTES;

/// Key blocks whose K and V a `Variant::q_ahead` producer loads before the next tile's Q:
/// the rings' depth.
const QA_BLOCKS: u32 = STAGES;

impl Ctx {
    /// TMA loads of a `rows`-row tile (one box per 64 columns; the map's box is `rows`
    /// tall) at shared address `base + dst`, sequence rows from `row`, head `h` (of the
    /// tile's batch), completing on `full`.
    #[allow(clippy::too_many_arguments)]
    fn load(
        &self,
        b: &mut Builder,
        (tm, rows): (Reg<B64>, u32),
        (base, dst): (Reg<B32>, u32),
        row: Reg<B32>,
        h: Reg<B32>,
        full: Addr,
    ) {
        b.mbarrier_arrive_expect_tx(full, rows * self.d * 2);
        for p in 0..self.d / 64 {
            let coords = vec![
                Operand::Imm(64 * p as i64),
                h.into(),
                row.into(),
                self.batch.into(),
            ];
            let off = dst + p * rows * ROW_BYTES;
            b.tma_load(Addr::Shared(base, off as i32), tm, coords, full);
        }
    }

    /// The producer thread on one tile: Q into `slot` (free: persistent, the scheduler
    /// waited for its release), then K and V of every key block, last first, into the
    /// rings.
    pub(super) fn produce(&self, b: &mut Builder, tm: &[Reg<B64>], m0: Reg<B32>, slot: &QSlot) {
        self.load_q(b, tm, m0, slot);
        let n = b.mov(0u32);
        self.produce_kv(b, tm, n, self.n_blocks);
    }

    /// Q of the tile's rows from `m0` (its head and batch) into `slot` (free), completing
    /// on its Q full.
    pub(super) fn load_q(&self, b: &mut Builder, tm: &[Reg<B64>], m0: Reg<B32>, slot: &QSlot) {
        let q_at = (slot.smem, self.lay.q);
        let rows = (tm[0], self.block_m());
        self.load(b, rows, q_at, m0, self.head, slot.bar(Q_FULL));
    }

    /// The producer on one tile whose Q is loaded (`Variant::q_ahead`): K and V of its
    /// first `QA_BLOCKS` key blocks (the rings' depth), then `ahead` (the next tile's Q),
    /// then the rest.
    pub(super) fn produce_ahead(
        &self,
        b: &mut Builder,
        tm: &[Reg<B64>],
        ahead: &mut dyn FnMut(&mut Builder),
    ) {
        let n = b.mov(0u32);
        let first = b.min_u32(self.n_blocks, QA_BLOCKS);
        self.produce_kv(b, tm, n, first);
        ahead(b);
        self.produce_kv(b, tm, n, self.n_blocks);
    }

    /// K and V of key blocks `n..end` (`n` advanced to `end`).
    fn produce_kv(&self, b: &mut Builder, tm: &[Reg<B64>], n: Reg<B32>, end: Reg<B32>) {
        let lp = b.loop_start_divergent();
        let more = b.setp_u32(Cmp::Lt, n, end);
        b.loop_exit_unless(&lp, more);
        let st = self.stage(b, n);
        let free = b.xor_b32(st.ph, 1u32);
        let row = self.key_row(b, n);
        b.mbarrier_wait(st.bar(K_EMPTY), free, "K empty");
        let (k_at, v_at) = ((st.smem, self.lay.k), (st.smem, self.lay.v));
        self.load(b, (tm[1], BLOCK_N), k_at, row, self.kv_head, st.bar(K_FULL));
        b.mbarrier_wait(st.bar(V_EMPTY), free, "V empty");
        self.load(b, (tm[2], BLOCK_N), v_at, row, self.kv_head, st.bar(V_FULL));
        let n1 = b.add_u32(n, 1u32);
        b.assign(n, n1);
        b.loop_end(lp);
    }
}

/// Waits, after the producer's last tile, for the consumers' release of the last of the
/// `total` key blocks, so that no copy outlives the producer.
pub(super) fn drain(b: &mut Builder, (smem, tile_bytes): (Reg<B32>, u32), total: Reg<B32>) {
    let none = b.setp_u32(Cmp::Eq, total, 0u32);
    b.unless(none, |b| {
        let last = b.sub_u32(total, 1u32);
        let st = Stage::at(b, (smem, tile_bytes), last);
        b.mbarrier_wait(st.bar(V_EMPTY), st.ph, "V empty (drain)");
    });
}
