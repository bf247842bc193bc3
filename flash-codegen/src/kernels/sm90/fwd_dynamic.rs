//! Kernel layer, sm_90a: the forward's dynamic scheduler (`fwd_sched::Grid::Dynamic`,
//! FA3's): CTA `c` of `G` starts with tile `c`, then its producer takes
//! `G + atom.add(counter, 1)` until the tiles run out and hands each index to the
//! consumers in shared memory beside the tile's Q barrier (its arrival publishes it). The
//! order: heads in groups whose K and V fit in L2 together, within a group the query
//! blocks' rank major (causal: the longest first, so the claims balance the CTAs' work as
//! longest-first list scheduling does). The counter is a zeroed `u32[2]` workspace
//! (claims, CTAs done) the last CTA to finish zeroes again.

use super::fwd_ctx::{Layout, Q_EMPTY, Q_FULL, QSlot};
use super::fwd_sched::{Place, Sched, Tile};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, LdCache, Pred, Reg, Space, Special, Ty};

/// Shared-memory offset of the tile index handed to the consumers, from its Q slot's
/// barriers' base (`QSlot::bar`), in the barriers' kilobyte.
pub(super) const TILE_INDEX: i32 = 160;
/// Offset of the tile's coordinates as the producer decoded them (`m0`, `head`,
/// `kv_head`, `batch`: u32 each, 16-byte aligned in both slots), so that the consumers
/// start a tile without the order's divisions.
pub(super) const TILE_COORDS: i32 = 176;
/// The K and V bytes the heads of one group of the order keep in L2 at most.
const L2_KV_BYTES: u32 = 16 << 20;

impl Sched {
    /// The producer thread: runs `body` on each of the CTA's tiles (`slot`: the tile's Q
    /// slot, free, its index published); returns the key blocks of all of them. Claims the
    /// next tile before loading this one's, publishes the final index (past the last tile,
    /// on a plain arrival on the slot's Q full) and, last CTA out, zeroes the counter.
    pub(super) fn produce_claimed(
        &self,
        b: &mut Builder,
        (smem, lay): (Reg<B32>, &Layout),
        mut body: impl FnMut(&mut Builder, &Tile, Place, &QSlot),
    ) -> Reg<B32> {
        let Claims {
            counter,
            tiles,
            m_blocks,
            ctas,
            t,
            j,
            it,
        } = self.claims(b);
        let lp = b.loop_start_divergent();
        let (slot, more) = Self::post_index(b, (smem, lay), (j, t), tiles);
        b.loop_exit_unless(&lp, more);
        let claimed = b.atom_add_u32(Addr::Global(counter, 0), 1u32, false);
        let tile = self.grouped_tile(b, t, m_blocks);
        post_coords(b, &slot, &tile);
        body(b, &tile, Place { j, it0: it }, &slot);
        Place { j, it0: it }.advance(b, tile.n_blocks);
        let next = b.add_u32(ctas, claimed);
        b.assign(t, next);
        b.loop_end(lp);
        zero_counter(b, counter, ctas);
        it
    }

    /// [`Sched::produce_claimed`] with each next tile's Q loaded early
    /// (`fwd::Variant::q_ahead`): the CTA's first tile is published and its Q loaded
    /// before the loop; on each tile `body` calls its hook once the rings hold the tile's
    /// first key blocks, and the hook publishes the next claimed index in the next slot
    /// (once free) with that tile's Q load (past the last tile: the plain arrival).
    pub(super) fn produce_claimed_ahead(
        &self,
        b: &mut Builder,
        (smem, lay): (Reg<B32>, &Layout),
        load_q: impl Fn(&mut Builder, &Tile, &QSlot),
        mut body: impl FnMut(&mut Builder, &Tile, Place, &mut dyn FnMut(&mut Builder)),
    ) -> Reg<B32> {
        let c = self.claims(b);
        let (tiles, m_blocks, t, j, it) = (c.tiles, c.m_blocks, c.t, c.j, c.it);
        let place = (smem, lay);
        self.publish(b, place, (j, t), (tiles, m_blocks), &load_q);
        let lp = b.loop_start_divergent();
        let more = b.setp_u32(Cmp::Lt, t, tiles);
        b.loop_exit_unless(&lp, more);
        let claimed = b.atom_add_u32(Addr::Global(c.counter, 0), 1u32, false);
        let next = b.add_u32(c.ctas, claimed);
        let tile = self.grouped_tile(b, t, m_blocks);
        let j1 = b.add_u32(j, 1u32);
        body(b, &tile, Place { j, it0: it }, &mut |b| {
            self.publish(b, place, (j1, next), (tiles, m_blocks), &load_q)
        });
        Place { j, it0: it }.advance(b, tile.n_blocks);
        b.assign(t, next);
        b.loop_end(lp);
        zero_counter(b, c.counter, c.ctas);
        it
    }

    /// The producer's claim state: the counter (generic address), the tile count and query
    /// blocks per head, the grid size, the CTA's first tile (its own index), and the
    /// loop-carried tile and key-block counts.
    fn claims(&self, b: &mut Builder) -> Claims {
        let counter = self
            .counter
            .expect("generator bug: a dynamic grid without its counter");
        let counter = b.cvta_global(counter);
        let (tiles, m_blocks) = self.tiles(b);
        let ctas = b.special(Special::NCtaIdX);
        let t = b.special(Special::CtaIdX);
        let t = b.mov(t);
        let (j, it) = (b.mov(0u32), b.mov(0u32));
        Claims {
            counter,
            tiles,
            m_blocks,
            ctas,
            t,
            j,
            it,
        }
    }

    /// Tile index `t` into the slot of the CTA's `j`-th tile, once free (its Q-empty
    /// phase of two uses before); past the last tile (not `more`) published at once by a
    /// plain arrival on its Q full. Returns the slot and `more`.
    fn post_index(
        b: &mut Builder,
        (smem, lay): (Reg<B32>, &Layout),
        (j, t): (Reg<B32>, Reg<B32>),
        tiles: Reg<B32>,
    ) -> (QSlot, Reg<Pred>) {
        let slot = QSlot::of(b, (smem, lay), j);
        let ph = slot.ph(b);
        let ph = b.xor_b32(ph, 1u32);
        b.mbarrier_wait(slot.bar(Q_EMPTY), ph, "Q empty");
        b.st(Space::Shared, Ty::U32, slot.bar(TILE_INDEX), &[t]);
        let more = b.setp_u32(Cmp::Lt, t, tiles);
        b.when(more, true, |b| b.mbarrier_arrive(slot.bar(Q_FULL)));
        (slot, more)
    }

    /// Tile index `t` into the slot of the CTA's `j`-th tile, once free; past the last
    /// tile a plain arrival on its Q full publishes it, otherwise the tile's Q load does.
    fn publish(
        &self,
        b: &mut Builder,
        (smem, lay): (Reg<B32>, &Layout),
        (j, t): (Reg<B32>, Reg<B32>),
        (tiles, m_blocks): (Reg<B32>, Reg<B32>),
        load_q: &dyn Fn(&mut Builder, &Tile, &QSlot),
    ) {
        b.comment("-- the next tile: its index and Q into its slot --");
        let (slot, _more) = Self::post_index(b, (smem, lay), (j, t), tiles);
        let past = b.setp_u32(Cmp::Ge, t, tiles);
        b.unless(past, |b| {
            let tile = self.grouped_tile(b, t, m_blocks);
            post_coords(b, &slot, &tile);
            load_q(b, &tile, &slot);
        });
    }

    /// The consumers: runs `body` on each of the CTA's tiles once its Q has landed, its
    /// index and coordinates read beside the barrier (past the last tile: done); returns
    /// their key blocks.
    pub(super) fn consume_claimed(
        &self,
        b: &mut Builder,
        (smem, lay): (Reg<B32>, &Layout),
        mut body: impl FnMut(&mut Builder, &Tile, Place),
    ) -> Reg<B32> {
        let (tiles, _) = self.tiles(b);
        let (j, it) = (b.mov(0u32), b.mov(0u32));
        let lp = b.loop_start();
        let slot = QSlot::of(b, (smem, lay), j);
        let ph = slot.ph(b);
        b.mbarrier_wait(slot.bar(Q_FULL), ph, "Q full");
        let [t] = b.ld::<B32, 1>(
            Space::Shared,
            LdCache::Default,
            Ty::U32,
            slot.bar(TILE_INDEX),
        );
        let more = b.setp_u32(Cmp::Lt, t, tiles);
        b.loop_exit_unless(&lp, more);
        let coords = b.ld::<B32, 4>(
            Space::Shared,
            LdCache::Default,
            Ty::U32,
            slot.bar(TILE_COORDS),
        );
        let tile = self.tile_at(b, coords);
        body(b, &tile, Place { j, it0: it });
        Place { j, it0: it }.advance(b, tile.n_blocks);
        b.loop_end(lp);
        it
    }

    /// Tile `t` of `m_blocks * bh` (`bh` = heads * batches) in the persistent order:
    /// groups of `gh` consecutive (batch, head)s whose K and V fit `L2_KV_BYTES` together
    /// (`gh = (L2_KV_BYTES / (4 d) / sk) * min(group, 64)`, at least 1), within a group
    /// the query block's rank major (causal: the last, longest, first), its heads minor.
    fn grouped_tile(&self, b: &mut Builder, t: Reg<B32>, m_blocks: Reg<B32>) -> Tile {
        let bh = b.mul_lo_u32(self.heads, self.batches);
        let budget = b.mov(L2_KV_BYTES / (4 * self.head_dim));
        // (per = 0 past sk = 64K at d64, 32K at d128: groups of one head then, splitting
        // GQA groups; max(per, 1) would keep them whole, to be run on a device first)
        let per = b.div_u32(budget, self.sk);
        let shared = b.min_u32(self.group, 64u32);
        let gh = b.mul_lo_u32(per, shared);
        let gh = b.max_u32(gh, 1u32);
        let gh = b.min_u32(gh, bh);
        let span = b.mul_lo_u32(gh, m_blocks);
        let g = b.div_u32(t, span);
        let u = b.rem_u32(t, span);
        let g0 = b.mul_lo_u32(g, gh);
        let rest = b.sub_u32(bh, g0);
        let size = b.min_u32(gh, rest);
        let x = b.div_u32(u, size);
        let x = if self.causal() {
            let last = b.sub_u32(m_blocks, 1u32);
            b.sub_u32(last, x)
        } else {
            x
        };
        let hb = b.rem_u32(u, size);
        let hb = b.add_u32(g0, hb);
        let head = b.rem_u32(hb, self.heads);
        let batch = b.div_u32(hb, self.heads);
        self.coords(b, x, head, batch)
    }
}

/// The producer's decoded `tile` into its slot's [`TILE_COORDS`], before the arrival
/// that publishes the slot (the Q load's `expect_tx`: the release orders the store).
fn post_coords(b: &mut Builder, slot: &QSlot, tile: &Tile) {
    let coords = [tile.m0, tile.head, tile.kv_head, tile.batch];
    b.st(Space::Shared, Ty::U32, slot.bar(TILE_COORDS), &coords);
}

/// [`Sched::claims`]' registers.
struct Claims {
    counter: Reg<B64>,
    tiles: Reg<B32>,
    m_blocks: Reg<B32>,
    ctas: Reg<B32>,
    t: Reg<B32>,
    j: Reg<B32>,
    it: Reg<B32>,
}

/// The last CTA out (the `ctas`-th to count itself done) zeroes the claim counter for the
/// next launch.
fn zero_counter(b: &mut Builder, counter: Reg<B64>, ctas: Reg<B32>) {
    b.comment("-- the last CTA out zeroes the counter for the next launch --");
    let done = b.atom_add_u32(Addr::Global(counter, 4), 1u32, true);
    let last = b.sub_u32(ctas, 1u32);
    let last = b.setp_u32(Cmp::Eq, done, last);
    let zero = b.mov(0u32);
    b.when(last, false, |b| {
        b.st(Space::Global, Ty::U32, Addr::Global(counter, 0), &[zero]);
        b.st(Space::Global, Ty::U32, Addr::Global(counter, 4), &[zero]);
    });
}

#[cfg(test)]
mod tests {
    use crate::kernels::sm90::fwd::{Variant, module};
    use crate::ptx::print;
    use crate::spec::{DType, Mask};

    /// `q_ahead`: the producer publishes the CTA's first tile before its loop, and each
    /// next tile (its Q-empty wait, index and Q load) between the current tile's first K/V
    /// loads and the rest (two copies of the K/V loop around it); without it, once per
    /// tile before its loads.
    #[test]
    fn q_ahead_loads_the_next_q_between_the_key_blocks() {
        let ship = Variant {
            tma_store: true,
            ..Variant::shipping_for(DType::Bf16, 128, Mask::Local)
        };
        let qa = print::module(&module(Variant {
            q_ahead: true,
            ..ship
        }));
        let producer = qa
            .split("setmaxnreg.inc")
            .next()
            .expect("the producer first");
        let parts: Vec<_> = producer
            .split("-- the next tile: its index and Q")
            .collect();
        assert_eq!(parts.len(), 3, "{producer}");
        // before the loop: no K/V load; in the loop: the claim, K/V loads, the next
        // tile's Q, the remaining K/V loads
        let kv = |s: &str| s.matches("mbarrier.arrive.expect_tx").count();
        assert_eq!(kv(parts[0]), 0);
        assert!(parts[1].contains("atom.global.add.u32"));
        assert_eq!(kv(parts[1]), 1 + 2, "the first tile's Q, then K and V");
        assert_eq!(kv(parts[2]), 1 + 2, "the next tile's Q, then K and V");
        let plain = print::module(&module(ship));
        let producer = plain
            .split("setmaxnreg.inc")
            .next()
            .expect("the producer first");
        assert!(!producer.contains("-- the next tile"));
    }

    /// The producer stores each tile's decoded coordinates before the Q load's arrival
    /// publishes the slot; the consumers load them after the Q-full wait and divide by no
    /// runtime value (the order's divisions stay with the producer), with and without
    /// `q_ahead`.
    #[test]
    fn the_consumers_take_the_producers_coordinates() {
        let coords = format!("+{}]", super::TILE_COORDS);
        for q_ahead in [false, true] {
            let var = Variant {
                q_ahead,
                ..Variant::shipping_for(DType::F16, 64, Mask::Causal)
            };
            let ptx = print::module(&module(var));
            let (producer, consumer) = ptx.split_once("setmaxnreg.inc").expect("two roles");
            let store = producer
                .find("st.shared.v4.u32")
                .expect("the coordinates' store");
            assert!(producer[store..].lines().next().unwrap().contains(&coords));
            let arrive = producer[store..]
                .find("mbarrier.arrive.expect_tx")
                .expect("the Q load after the store");
            assert!(arrive > 0);
            // the consumers' first wait is the tile's Q full
            let wait = consumer.find("mbarrier.try_wait").expect("the Q-full wait");
            let load = consumer
                .find("ld.shared.v4.u32")
                .expect("the coordinates' load");
            assert!(wait < load && consumer[load..].lines().next().unwrap().contains(&coords));
            let divides = consumer.lines().any(|l| {
                let l = l.trim();
                (l.starts_with("div.u32") || l.starts_with("rem.u32"))
                    && l.trim_end_matches(';')
                        .rsplit(", ")
                        .next()
                        .unwrap()
                        .starts_with('%')
            });
            assert!(
                !divides,
                "q_ahead {q_ahead}: a consumer divides by a register"
            );
        }
    }
}
