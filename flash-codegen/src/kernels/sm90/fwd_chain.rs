//! Kernel layer, sm_90a: the persistent forward's consumers with the tile edges pipelined
//! (`fwd::Variant::chained`). Each tile's last O += P V is issued beside the next tile's
//! first S = Q K^T, in one turn; the next tile's first softmax runs while both are in
//! flight, and the tile's epilogue follows once its product lands. A tile's first block
//! waits alone only at the CTA's first tile and after a tile with no key block; the last
//! tile's P V is drained after the loop. With the TMA epilogue (`Variant::tma_store`) a
//! tile's O is staged in its own Q slot, which stays held until the store has read it (the
//! next tile's edge), not released after the tile's last S.

use super::fwd_consumer::{Consumer, Edges, Wg};
use super::fwd_ctx::{
    BLOCK_N, Ctx, K_EMPTY, K_FULL, Layout, Q_EMPTY, QSlot, Stage, V_EMPTY, V_FULL,
};
use super::fwd_epilogue::{Out, Rows};
use super::fwd_sched::{Sched, Tile};
use super::fwd_turn::Turn;
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::{Addr, B32, Builder, Cmp, F32, LdCache, Pred, Reg, Space, Special, Ty};
use crate::tile::acc::AccTile;
use crate::tile::desc::{Major, WgmmaDesc};
use crate::tile::smem::SmemTile;

/// A record's row while no tile waits (query rows stay below 2^31).
const IDLE: u32 = u32::MAX;

/// Shared memory per thread, after the layout: the thread's record of the pending tile
/// (`PENDING`) and of this one (`CURRENT`), each its first row, batch, head and Q slot
/// count `j` (words 0, 1, 2, 3). Kept there, not in registers: the three-consumer d64
/// kernel's 160 have no room left at the tile edge, where the pending tile's epilogue runs
/// beside this tile's state.
pub(super) const RECORD_BYTES: u32 = 32;
const PENDING: i32 = 0;
const CURRENT: i32 = 16;
/// A record's words (byte offsets): the first row, batch, head and Q slot count.
const ROW: i32 = 0;
const BATCH: i32 = 4;
const HEAD: i32 = 8;
const SLOT: i32 = 12;

/// What every tile of a warpgroup shares: the registers the loop carries and the
/// tile-independent parts of its view.
struct Chain<'a> {
    o: AccTile,
    softmax: OnlineSoftmax,
    p: Vec<[Reg<B32>; 4]>,
    /// This thread's record (`RECORD_BYTES` at `lay.bytes() + tid * RECORD_BYTES`).
    rec: Reg<B32>,
    v: WgmmaDesc,
    tid: Reg<B32>,
    smem: Reg<B32>,
    lay: &'a Layout,
    out: &'a Out,
    /// The TMA epilogue's tile of a Q slot (`None`: the pair stores).
    q_tile: Option<&'a SmemTile>,
}

impl Chain<'_> {
    /// The pending tile's rows, for this thread's lane column `t2`.
    fn pending_rows(&self, b: &mut Builder, t2: Reg<B32>) -> Rows {
        Rows {
            row: self.record(b, PENDING + ROW),
            batch: self.record(b, PENDING + BATCH),
            head: self.record(b, PENDING + HEAD),
            t2,
        }
    }

    /// This thread's record word at `off` (from `PENDING` or `CURRENT`).
    fn record(&self, b: &mut Builder, off: i32) -> Reg<B32> {
        let [v] = b.ld::<B32, 1>(
            Space::Shared,
            LdCache::Default,
            Ty::U32,
            Addr::Shared(self.rec, off),
        );
        v
    }

    /// `v` to this thread's record word at `off`.
    fn set_record(&self, b: &mut Builder, off: i32, v: Reg<B32>) {
        b.st(Space::Shared, Ty::U32, Addr::Shared(self.rec, off), &[v]);
    }

    /// Whether no tile waits.
    fn idle(&self, b: &mut Builder) -> Reg<Pred> {
        let code = self.record(b, PENDING);
        b.setp_u32(Cmp::Eq, code, IDLE)
    }

    /// The pending tile's last block's stage: the ring position before `it` (the next
    /// tile's first, or past the CTA's last).
    fn last_stage(&self, b: &mut Builder, it: Reg<B32>) -> Stage {
        let last = b.sub_u32(it, 1u32);
        Stage::at(b, (self.smem, self.lay.tile_bytes), last)
    }

    /// O to zero, for the next tile.
    fn zero_o(&self, b: &mut Builder) {
        for r in self.o.regs() {
            b.assign(r, 0.0f32);
        }
    }
}

impl Consumer {
    /// Every tile of the CTA (`sched`'s persistent order), the edges pipelined (above).
    pub(super) fn consume_chained(
        &self,
        b: &mut Builder,
        sched: &Sched,
        (smem, lay, out, q_tile): (Reg<B32>, &Layout, &Out, Option<&SmemTile>),
        ctx_of: impl Fn(&Tile, Reg<B32>) -> Ctx,
        (tid, wg, turn): (Reg<B32>, Reg<B32>, Option<Turn>),
    ) {
        let o = AccTile::zeros(b, 1, sched.head_dim);
        let softmax =
            OnlineSoftmax::new(b, o.rows(), self.softmax_scale).with_fma_exp2(self.fma_exp2);
        let p = self.p_regs(b);
        let rec = b.mad_lo_u32(tid, RECORD_BYTES, smem);
        let rec = b.add_u32(rec, lay.bytes());
        let v = WgmmaDesc::new(SmemTile::new(lay.v, BLOCK_N, sched.head_dim), Major::Mn);
        let mut ch = Chain {
            o,
            softmax,
            p,
            rec,
            v,
            tid,
            smem,
            lay,
            out,
            q_tile,
        };
        let idle = b.mov(IDLE);
        ch.set_record(b, PENDING, idle);
        let total = sched.consume_tiles(b, (smem, lay), |b, tile, at| {
            let ctx = ctx_of(tile, at.it0);
            let w = self.setup(b, &ctx, (tid, wg, tile.m0), (turn, at.j));
            ch.set_record(b, CURRENT + ROW, w.row);
            ch.set_record(b, CURRENT + BATCH, ctx.batch);
            ch.set_record(b, CURRENT + HEAD, ctx.head);
            ch.set_record(b, CURRENT + SLOT, at.j);
            let pending = ch.record(b, PENDING);
            let idle = b.setp_u32(Cmp::Eq, pending, IDLE);
            let waiting = b.setp_u32(Cmp::Ne, pending, IDLE);
            let none = b.setp_u32(Cmp::Eq, ctx.n_blocks, 0u32);
            let some = b.setp_u32(Cmp::Ne, ctx.n_blocks, 0u32);
            b.comment("-- a tile with no key block: the pending one drained, zeros, -inf --");
            b.unless_uniform(some, |b| {
                b.unless_uniform(idle, |b| self.drain(b, &mut ch, at.it0));
                let lse = ch.softmax.finish(b, &mut ch.o);
                match ch.q_tile {
                    None => {
                        self.release_q(b, &w);
                        self.epilogue(b, &w.rows(&ctx), ch.out, (&ch.o, &lse));
                    }
                    Some(q_tile) => {
                        let rows = (&w.rows(&ctx), w.wg_row, w.lead);
                        self.store_through_slot(b, (&ch, q_tile), rows, at.j, &lse);
                    }
                }
            });
            b.unless_uniform(none, |b| {
                b.unless_uniform(waiting, |b| {
                    let first = b.mov(0u32);
                    self.first_block(b, &ctx, &w, &mut ch.softmax, &ch.p, first);
                });
                b.unless_uniform(idle, |b| self.edge(b, (&ctx, &w), &mut ch, at.it0));
                let next = b.mov(1u32);
                self.steady_blocks(b, &ctx, &w, &mut ch.softmax, &mut ch.o, &ch.p, next);
                // (the TMA epilogue's slot: released by the store at the next edge)
                if ch.q_tile.is_none() {
                    self.release_q(b, &w);
                }
                for word in [ROW, BATCH, HEAD, SLOT] {
                    let v = ch.record(b, CURRENT + word);
                    ch.set_record(b, PENDING + word, v);
                }
            });
        });
        b.comment("-- the CTA's last tile: its P V alone --");
        let idle = ch.idle(b);
        b.unless_uniform(idle, |b| self.drain(b, &mut ch, total));
    }

    /// The pending tile's last P V (at the ring position before `it`) alone (no turn, as
    /// the unchained last block), then its epilogue; leaves O zero, the statistics fresh
    /// and no tile pending. (The warpgroup's leader and the lane's column are recomputed
    /// here: no register holds them across the loop.)
    fn drain(&self, b: &mut Builder, ch: &mut Chain, it: Reg<B32>) {
        b.comment("-- the pending tile's last P V, then its epilogue --");
        let at = ch.last_stage(b, it);
        self.issue_pv(b, &ch.v, (&ch.p, &ch.o), &at, (true, true));
        b.wgmma_wait(0);
        let lead = Self::leader(b, ch.tid);
        Self::release(b, lead, &at, V_EMPTY);
        let lse = ch.softmax.finish(b, &mut ch.o);
        let lane = b.special(Special::LaneId);
        let t2 = AccTile::lane_col(b, lane);
        self.store_pending(b, ch, t2, &lse);
        ch.zero_o(b);
        ch.softmax.reset(b);
        let idle = b.mov(IDLE);
        ch.set_record(b, PENDING, idle);
    }

    /// The edge between the pending tile and this one (its first block): S_0 and the
    /// pending P V issued in one turn, S_0 masked and its softmax begun on fresh
    /// statistics (the pending tile's `1 / l` and LSE taken first) while the product
    /// runs; then P_0 carried, the pending tile's O normalised and stored, O zeroed.
    fn edge(&self, b: &mut Builder, (ctx, w): (&Ctx, &Wg), ch: &mut Chain, it0: Reg<B32>) {
        b.comment("-- tile edge: this tile's first S beside the pending tile's last P V --");
        let zero = b.mov(0u32);
        let at = ctx.stage(b, zero);
        let old = ch.last_stage(b, it0);
        b.mbarrier_wait(old.bar(V_FULL), old.ph, "V full");
        b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
        w.take_turn(b);
        let mut s = self.issue_s(b, w, &at);
        self.issue_pv(b, &ch.v, (&ch.p, &ch.o), &old, (false, false));
        w.pass_turn(b);
        b.wgmma_wait(1);
        Self::release(b, w.lead, &at, K_EMPTY);
        self.transform(b, (ctx, w), &mut s, zero);
        self.mask(b, (ctx, w), &mut s, (zero, Edges::Both));
        let fin = ch.softmax.finals(b);
        ch.softmax.reset(b);
        // fresh statistics: nothing to rescale (O is zeroed below)
        let _ = ch.softmax.step_deferred(b, &mut s);
        b.wgmma_wait(0);
        Self::release(b, w.lead, &old, V_EMPTY);
        // P_0 packed first: S's registers are free for the epilogue
        self.carry(b, &ch.p, &s);
        for (r, (inv, _)) in fin.iter().enumerate() {
            ch.o.scale_row(b, r, *inv);
        }
        let lse: Vec<_> = fin.iter().map(|f| f.1).collect();
        self.store_pending(b, ch, w.t2, &lse);
        ch.zero_o(b);
    }

    /// The pending tile's O (normalised) and LSE stored: by pairs, or staged in its Q
    /// slot and stored by TMA, the slot released once the store has read it.
    fn store_pending(&self, b: &mut Builder, ch: &Chain, t2: Reg<B32>, lse: &[Reg<F32>]) {
        let rows = ch.pending_rows(b, t2);
        let Some(q_tile) = ch.q_tile else {
            self.epilogue(b, &rows, ch.out, (&ch.o, lse));
            return;
        };
        let j = ch.record(b, PENDING + SLOT);
        let lead = Self::leader(b, ch.tid);
        self.store_through_slot(b, (ch, q_tile), (&rows, rows.row, lead), j, lse);
    }

    /// The TMA epilogue of the tile of `rows` (its rows, warpgroup's first row and
    /// leader) through its Q slot, the `j`-th (`q_tile`: a slot's tile), then the slot
    /// released (the leader has waited for the store to read it).
    fn store_through_slot(
        &self,
        b: &mut Builder,
        (ch, q_tile): (&Chain, &SmemTile),
        rows: (&Rows, Reg<B32>, Reg<Pred>),
        j: Reg<B32>,
        lse: &[Reg<F32>],
    ) {
        let slot = QSlot::of(b, (ch.smem, ch.lay), j);
        let st = (q_tile, slot.smem, ch.tid);
        self.epilogue_tma(b, rows, ch.out, st, (&ch.o, lse));
        Self::release_slot(b, slot.bar(Q_EMPTY));
    }
}

#[cfg(test)]
mod tests {
    use super::RECORD_BYTES;
    use crate::kernels::sm90::fwd::{Variant, module};
    use crate::kernels::sm90::fwd_ctx::Q_EMPTY;
    use crate::ptx::print;
    use crate::spec::{DType, Mask};

    /// The chained kernel's tile edge: from its comment to the masked blocks'.
    fn edge_of(ptx: &str) -> &str {
        ptx.split("-- tile edge:")
            .nth(1)
            .and_then(|e| e.split("-- blocks that need the mask --").next())
            .expect("an edge before the masked blocks")
    }

    /// Where `pat` first occurs in the d`d` kernel's `edge`.
    fn find(edge: &str, pat: &str, d: u32) -> usize {
        edge.find(pat)
            .unwrap_or_else(|| panic!("d{d}: `{pat}` missing from the edge:\n{edge}"))
    }

    /// The edge issues the next tile's S and the pending P V in one turn (one `bar.sync`
    /// before both, one `bar.arrive` after), waits for S first (its mask and softmax
    /// between the two waits) and stores the pending tile's O only once the product has
    /// landed; the unchained kernel has no edge and no records.
    #[test]
    fn the_edge_issues_both_products_in_one_turn() {
        for (dtype, d, causal) in [(DType::Bf16, 64, true), (DType::F16, 128, false)] {
            // chained tiles store O with the pair stores
            let dynamic = Variant {
                tma_store: false,
                ..Variant::shipping(dtype, d, causal)
            };
            let var = Variant {
                chained: true,
                ..dynamic
            };
            let ptx = print::module(&module(var));
            let edge = edge_of(&ptx);
            let at = |pat: &str| find(edge, pat, d);
            let order = [
                at("bar.sync"),
                at("-- S = Q K^T --"),
                at("-- O += P V --"),
                at("bar.arrive"),
                at("wgmma.wait_group.sync.aligned 1;"),
                at("-- mask:"),
                at("wgmma.wait_group.sync.aligned 0;"),
                at("-- epilogue: O and the LSE --"),
            ];
            assert!(order.is_sorted(), "d{d}: {order:?}\n{edge}");
            assert_eq!(edge.matches("bar.sync").count(), 1, "d{d}");
            assert_eq!(edge.matches("bar.arrive").count(), 1, "d{d}");
            // S: d / 16 k-steps of 64 x 128; P V: 128 keys / 16 k-steps of 64 x d
            let (s, pv) = edge[order[1]..order[3]].split_at(order[2] - order[1]);
            assert_eq!(s.matches("m64n128k16").count(), (d / 16) as usize, "d{d}");
            assert_eq!(pv.matches(&format!("m64n{d}k16")).count(), 8, "d{d}");
            let plain = print::module(&module(dynamic));
            assert!(!plain.contains("-- tile edge:"));
            assert_eq!(
                var.smem_bytes() - dynamic.smem_bytes(),
                RECORD_BYTES * var.threads()
            );
        }
    }

    /// With the TMA epilogue the pending tile's O goes through its own Q slot at the
    /// edge, once the pending P V has landed, and the slot is released only after the
    /// store has read it: the edge, a keyless tile and the drain (before a keyless tile,
    /// after the last tile) each release a slot, the end of a tile's key blocks none (the
    /// pair-store chain releases there, and at a keyless tile).
    #[test]
    fn a_chained_tma_epilogue_releases_the_slot_after_its_store() {
        let arrivals = |ptx: &str| {
            ptx.lines()
                .filter(|l| {
                    l.contains("mbarrier.arrive")
                        && l.trim_end().ends_with(&format!("+{Q_EMPTY}];"))
                })
                .count()
        };
        for (dtype, d, mask) in [
            (DType::Bf16, 64, Mask::Causal),
            (DType::F16, 128, Mask::Local),
        ] {
            let tst = Variant {
                chained: true,
                ..Variant::shipping_for(dtype, d, mask)
            };
            assert!(tst.tma_store, "the shipping kernels store O through TMA");
            let ptx = print::module(&module(tst));
            let edge = edge_of(&ptx);
            let at = |pat: &str| find(edge, pat, d);
            let read = at("cp.async.bulk.wait_group.read 0;");
            let order = [
                at("wgmma.wait_group.sync.aligned 0;"),
                at("-- epilogue: O by stmatrix"),
                at("cp.async.bulk.tensor.4d.global.shared::cta"),
                read,
                read + edge[read..]
                    .find(&format!("+{Q_EMPTY}];"))
                    .expect("the slot's release after the read"),
            ];
            assert!(order.is_sorted(), "d{d}: {order:?}\n{edge}");
            assert_eq!(arrivals(edge), 1, "d{d}");
            assert_eq!(arrivals(&ptx), 4, "d{d}: edge, keyless tile, two drains");
            let pairs = Variant {
                tma_store: false,
                ..tst
            };
            assert_eq!(arrivals(&print::module(&module(pairs))), 2, "d{d}");
        }
    }
}
