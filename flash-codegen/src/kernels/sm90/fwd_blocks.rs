//! Kernel layer, sm_90a: the forward consumers' key-block loops (see `fwd_consumer`):
//! every product waited for at once, or FA3's intra-warpgroup overlap.

use super::fwd_consumer::{Consumer, Edges, Wg};
use super::fwd_ctx::{BLOCK_N, Ctx, K_EMPTY, K_FULL, V_EMPTY, V_FULL, WG_ROWS};
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::{B32, Builder, Cmp, Reg};
use crate::tile::acc::AccTile;

impl Consumer {
    /// Every product waited for at once.
    pub(super) fn blocks(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
    ) {
        let n = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, n, ctx.n_blocks);
        b.loop_exit_unless(&lp, more);
        let at = ctx.stage(b, n);
        let mut s = self.masked_s(b, (ctx, w), &at, n);
        softmax.step(b, &mut s, o);
        let p = s.as_a(b, self.fmt, 0);
        b.mbarrier_wait(at.bar(V_FULL), at.ph, "V full");
        w.take_turn(b);
        self.issue_pv(b, &w.v, (&p, o), &at, (false, true));
        w.pass_turn(b);
        b.wgmma_wait(0);
        Self::release(b, w.lead, &at, V_EMPTY);
        let n1 = b.add_u32(n, 1u32);
        b.assign(n, n1);
        b.loop_end(lp);
    }

    /// FA3's intra-warpgroup overlap, key blocks visited last first: the first block's S
    /// and softmax; then per block i, S_i and P_{i-1} V_{i-1} in flight together, S_i's
    /// softmax under the second, O's rescale once it lands; the last P V after the loop.
    /// P is carried in fixed registers, rewritten only after the product reading them is
    /// complete.
    pub(super) fn blocks_overlapped(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
    ) {
        let skip = self.unseen_visits(b, ctx, w);
        self.pass_over(b, ctx, w, skip);
        let none = b.setp_u32(Cmp::Eq, skip, ctx.n_blocks);
        // no block of its own: the previous tile's Q slot released here
        b.if_uniform(none, |b| self.release_prev(b, w));
        b.unless_uniform(none, |b| {
            let p = self.p_regs(b);
            self.first_block(b, ctx, w, softmax, &p, skip);
            let next = b.add_u32(skip, 1u32);
            self.steady_blocks(b, ctx, w, softmax, o, &p, next);
            b.comment("-- the last block's P V --");
            let last = b.sub_u32(ctx.n_blocks, 1u32);
            let lat = ctx.stage(b, last);
            self.issue_pv(b, &w.v, (&p, o), &lat, (true, true));
            b.wgmma_wait(0);
            Self::release(b, w.lead, &lat, V_EMPTY);
        });
    }

    /// The registers P is carried in from one block to the next (A operand fragments).
    pub(super) fn p_regs(&self, b: &mut Builder) -> Vec<[Reg<B32>; 4]> {
        (0..BLOCK_N / 16)
            .map(|_| std::array::from_fn(|_| b.reg()))
            .collect()
    }

    /// S's probabilities, as the A operand, into the carried registers `p`.
    pub(super) fn carry(&self, b: &mut Builder, p: &[[Reg<B32>; 4]], s: &AccTile) {
        for (dst, src) in p.iter().zip(s.as_a(b, self.fmt, 0)) {
            for (d, x) in dst.iter().zip(src) {
                b.assign(*d, x);
            }
        }
    }

    /// Of the tile's visits, how many come first that no row of this warpgroup sees (the
    /// last key blocks, past its last row's causal limit; all of them when its rows all
    /// lie past `seqlen_q`): the warpgroup passes over them. Warp-uniform: from the
    /// warpgroup's first row (`%tid / 128`, uniform under `.reqntid`) and the tile.
    pub(super) fn unseen_visits(&self, b: &mut Builder, ctx: &Ctx, w: &Wg) -> Reg<B32> {
        let past = b.setp_u32(Cmp::Ge, w.wg_row, self.sq);
        let seen = if self.rule.per_row() {
            // keys below the last valid row's limit `last + 1 + sk - sq (+ right)`, in
            // blocks (from the tile's first, `lo`, under a window)
            let last = b.add_u32(w.wg_row, WG_ROWS - 1);
            let sq1 = b.sub_u32(self.sq, 1u32);
            let last = b.min_u32(last, sq1);
            let lim = b.add_u32(last, 1u32);
            let lim = b.add_u32(lim, self.sk);
            let lim = b.sub_s32(lim, self.sq);
            let lim = match self.rule.window() {
                Some(win) => b.add_s32(lim, win.right),
                None => lim,
            };
            let lim = b.max_s32(lim, 0i32);
            let nb = b.add_u32(lim, BLOCK_N - 1);
            let nb = b.shr_u32(nb, BLOCK_N.trailing_zeros());
            let nb = match ctx.window {
                Some(tw) => {
                    let nb = b.max_u32(nb, tw.lo);
                    b.sub_u32(nb, tw.lo)
                }
                None => nb,
            };
            b.min_u32(nb, ctx.n_blocks)
        } else {
            ctx.n_blocks
        };
        let seen = b.selp_b32(0u32, seen, past);
        b.sub_u32(ctx.n_blocks, seen)
    }

    /// The first `skip` visits, wholly masked for this warpgroup: each one's pingpong turn
    /// taken and passed (every consumer takes one per visit) and its K and V released once
    /// landed (an arrival before the load would count towards the stage's previous use).
    pub(super) fn pass_over(&self, b: &mut Builder, ctx: &Ctx, w: &Wg, skip: Reg<B32>) {
        b.comment("-- visits no row of this warpgroup sees: turns passed, K and V released --");
        let i = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, i, skip);
        b.loop_exit_unless(&lp, more);
        let at = ctx.stage(b, i);
        b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
        w.take_turn(b);
        w.pass_turn(b);
        Self::release(b, w.lead, &at, K_EMPTY);
        b.mbarrier_wait(at.bar(V_FULL), at.ph, "V full");
        Self::release(b, w.lead, &at, V_EMPTY);
        let i1 = b.add_u32(i, 1u32);
        b.assign(i, i1);
        b.loop_end(lp);
    }

    /// The block visited `first`-th alone (the first this warpgroup sees): S, mask,
    /// softmax (O is still zero: no rescale); its P carried.
    pub(super) fn first_block(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        p: &[[Reg<B32>; 4]],
        first: Reg<B32>,
    ) {
        b.comment("-- first block: S, mask, softmax (O is still zero: no rescale) --");
        let at = ctx.stage(b, first);
        let mut s = self.masked_s(b, (ctx, w), &at, first);
        let _ = softmax.step_deferred(b, &mut s);
        self.carry(b, p, &s);
    }

    /// The visited blocks from `start` (the one after the first): per block i, S_i and
    /// P_{i-1} V_{i-1} issued in one turn, S_i's softmax while they run. The blocks that
    /// need a mask (`ctx.n_masked`, the first visited) and the clean ones run in two
    /// copies of the loop, the second without the mask; under a sliding window a third
    /// copy, masked, runs the last visits (`n_left`: the window's left edge).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn steady_blocks(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        w: &Wg,
        softmax: &mut OnlineSoftmax,
        o: &mut AccTile,
        p: &[[Reg<B32>; 4]],
        start: Reg<B32>,
    ) {
        let i = b.mov(start);
        let both = Some(Edges::Both);
        let mut ranges = vec![(both, ctx.n_masked), (None, ctx.n_blocks)];
        if let Some(tw) = ctx.window {
            let clean_end = b.sub_u32(ctx.n_blocks, tw.n_left);
            ranges = if self.edge_masks {
                // visits [0, n_masked) cross the right edge, [clean_end, n_blocks) the
                // left: right alone up to the first that crosses both, both up to
                // n_masked (none when the two sets are apart), the clean ones, the left
                let right_end = b.min_u32(ctx.n_masked, clean_end);
                vec![
                    (Some(Edges::Right), right_end),
                    (both, ctx.n_masked),
                    (None, clean_end),
                    (Some(Edges::Left), ctx.n_blocks),
                ]
            } else {
                vec![
                    (both, ctx.n_masked),
                    (None, clean_end),
                    (both, ctx.n_blocks),
                ]
            };
        }
        for (masked, end) in ranges {
            b.comment(match masked {
                Some(Edges::Both) => "-- blocks that need the mask --",
                Some(Edges::Right) => "-- blocks at the window's right edge --",
                Some(Edges::Left) => "-- blocks at the window's left edge --",
                None => "-- blocks every row sees whole: no mask --",
            });
            let lp = b.loop_start();
            let more = b.setp_u32(Cmp::Lt, i, end);
            b.loop_exit_unless(&lp, more);
            // both waits before either product: no wgmma in flight across a spin
            // loop (ptxas serialises wgmmas around divergent code: C7520)
            let at = ctx.stage(b, i);
            let prev = b.sub_u32(i, 1u32);
            let pat = ctx.stage(b, prev);
            b.mbarrier_wait(pat.bar(V_FULL), pat.ph, "V full");
            b.mbarrier_wait(at.bar(K_FULL), at.ph, "K full");
            w.take_turn(b);
            let mut s = self.issue_s(b, w, &at);
            self.issue_pv(b, &w.v, (p, o), &pat, (false, false));
            w.pass_turn(b);
            b.wgmma_wait(1);
            Self::release(b, w.lead, &at, K_EMPTY);
            // a softcap's clean block: the maxima from the raw products (before the tanhs)
            let raw_max = match (masked, &self.transform) {
                (None, Some(t)) if self.raw_max && !softmax.is_fixed() => Some(t.block_max(b, &s)),
                _ => None,
            };
            self.transform(b, (ctx, w), &mut s, i);
            if let Some(edges) = masked {
                self.mask(b, (ctx, w), &mut s, (i, edges));
            }
            let rescale = match &raw_max {
                Some(mx) => softmax.step_deferred_from(b, &mut s, mx),
                None => softmax.step_deferred(b, &mut s),
            };
            b.wgmma_wait(0);
            Self::release(b, w.lead, &pat, V_EMPTY);
            rescale.apply(b, o);
            self.carry(b, p, &s);
            let i1 = b.add_u32(i, 1u32);
            b.assign(i, i1);
            b.loop_end(lp);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::sm90::fwd::{Variant, module};
    use crate::ptx::print;
    use crate::spec::{DType, Mask};

    /// `edge_masks`: the steady loop runs in four copies (the right edge alone, both
    /// edges, clean, the left edge alone), each masked copy with the passes of its edges
    /// only; the first block's two passes sit behind uniform branches. Without it: three
    /// copies, every masked one with both passes.
    #[test]
    fn each_masked_block_checks_the_edges_it_crosses() {
        let ship = Variant::shipping_for(DType::Bf16, 128, Mask::Local);
        let consumer = |var: Variant| {
            let ptx = print::module(&module(var));
            let (_, c) = ptx.split_once("setmaxnreg.inc").expect("two roles");
            c.to_string()
        };
        let (right, both, left) = (
            "-- mask: keys past the end or each row's window --",
            "-- mask: keys past the end, and outside each row's window --",
            "-- mask: keys before each row's window --",
        );
        let copies = |c: &str| -> Vec<(String, [usize; 3])> {
            c.split("-- blocks ")
                .skip(1)
                .map(|part| {
                    let part = part.split("-- the last block's P V").next().unwrap();
                    let head = part.lines().next().unwrap_or_default().to_string();
                    (head, [right, both, left].map(|m| part.matches(m).count()))
                })
                .collect()
        };
        let em = consumer(Variant {
            edge_masks: true,
            ..ship
        });
        assert_eq!(
            copies(&consumer(ship)),
            [
                ("that need the mask --", [0, 1, 0]),
                ("every row sees whole: no mask --", [0, 0, 0]),
                ("that need the mask --", [0, 1, 0]),
            ]
            .map(|(h, n)| (h.to_string(), n))
        );
        assert_eq!(
            copies(&em),
            [
                ("at the window's right edge --", [1, 0, 0]),
                ("that need the mask --", [0, 1, 0]),
                ("every row sees whole: no mask --", [0, 0, 0]),
                ("at the window's left edge --", [0, 0, 1]),
            ]
            .map(|(h, n)| (h.to_string(), n))
        );
        // the first block: one pass per edge, each behind a uniform branch
        let first = em
            .split("-- first block")
            .nth(1)
            .and_then(|s| s.split("-- blocks ").next())
            .expect("the first block");
        assert_eq!(
            [right, both, left].map(|m| first.matches(m).count()),
            [1, 0, 1]
        );
        assert!(first.matches("bra.uni").count() >= 2, "{first}");
    }

    /// With three consumers (d64), a softcap's clean blocks take the rows' maxima from
    /// the raw products (one more `tanh` per thread row than the masked copy's, for the
    /// max) and choose the new reference without a branch: every probability's `ex2`
    /// comes before the uniform branch that moves the reference. In a masked copy, and
    /// with two consumers (d128) in every copy, they follow it.
    #[test]
    fn softcap_clean_blocks_take_the_max_before_the_tanhs_with_three_consumers() {
        use crate::spec::Scores;
        for (d, raw) in [(64, true), (128, false)] {
            let var = Variant::shipping_scored(DType::Bf16, d, Mask::Causal, Scores::Softcap);
            assert_eq!(var.consumers == 3, raw, "d{d}");
            let ptx = print::module(&module(var));
            let copy = |head: &str| -> String {
                let part = ptx.split(head).nth(1).expect("the copy");
                part.split("-- blocks ").next().unwrap().to_string()
            };
            let (masked, clean) = (
                copy("-- blocks that need the mask --"),
                copy("-- blocks every row sees whole: no mask --"),
            );
            let tanh = |c: &str| c.matches("tanh.approx").count();
            // 64 rows x 128 keys over 128 threads: 64 scores and 2 rows a thread
            let extra = if raw { 2 } else { 0 };
            assert_eq!((tanh(&masked), tanh(&clean)), (64, 64 + extra), "d{d}");
            let moved = "-- new reference max";
            for (c, before) in [(&masked, 0), (&clean, if raw { 64 } else { 0 })] {
                let (head, _) = c.split_once(moved).expect("the reference's branch");
                assert_eq!(head.matches("ex2.approx").count(), before, "d{d}");
            }
        }
    }
}
