//! Kernel layer, sm_90a: the forward's producer thread (see `fwd`): per tile, Q into its
//! slot, then K and V of every key block into the rings, each a TMA load completing on its
//! full barrier; after the last tile, the drain.

use super::fwd_ctx::{BLOCK_N, Ctx, K_EMPTY, K_FULL, Q_FULL, QSlot, Stage, V_EMPTY, V_FULL};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, Operand, Reg};
use crate::tile::smem::ROW_BYTES;

impl Ctx {
    /// TMA loads of a `rows`-row tile (one box per 64 columns; the map's box is `rows`
    /// tall) at shared address `base + dst`, sequence rows from `row`, head `h`,
    /// completing on `full`.
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
        let q_at = (slot.smem, self.lay.q);
        self.load(
            b,
            (tm[0], self.block_m()),
            q_at,
            m0,
            self.head,
            slot.bar(Q_FULL),
        );
        let n = b.mov(0u32);
        let lp = b.loop_start_divergent();
        let more = b.setp_u32(Cmp::Lt, n, self.n_blocks);
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
