//! Kernel layer, sm_90a: the forward consumers' epilogue (see `fwd`): O normalised,
//! converted and stored from the accumulator layout, or staged in shared memory and
//! stored by TMA (`fwd::Variant::tma_store`), and the rows' LSE.

use super::fwd_consumer::{Consumer, Wg};
use super::fwd_ctx::{Ctx, EPI_BAR, WG_ROWS};
use crate::ptx::{Addr, B32, B64, Builder, Cmp, F32, Operand, Pred, Reg, Space, Special, Ty};
use crate::tile::acc::AccTile;
use crate::tile::frag::LDM_A;
use crate::tile::smem::{LdmLanes, ROW_BYTES, SmemTile};

/// Where the epilogue writes.
pub(super) struct Out {
    pub(super) o_ptr: Reg<B64>,
    pub(super) lse_ptr: Reg<B64>,
    pub(super) o_row: Reg<B32>,
    pub(super) o_head: Reg<B32>,
    pub(super) o_batch: Reg<B64>,
    pub(super) heads: Reg<B32>,
    /// The TMA epilogue's map of o (`tm_o`: Q's layout, 64-row boxes).
    pub(super) tm_o: Option<Reg<B64>>,
}

/// Whose rows a warpgroup's epilogue stores: the tile's batch and head, the thread's
/// first query row and lane column.
pub(super) struct Rows {
    pub(super) batch: Reg<B32>,
    pub(super) head: Reg<B32>,
    pub(super) row: Reg<B32>,
    pub(super) t2: Reg<B32>,
}

impl Wg {
    /// This warpgroup's rows of `ctx`'s tile.
    pub(super) fn rows(&self, ctx: &Ctx) -> Rows {
        Rows {
            batch: ctx.batch,
            head: ctx.head,
            row: self.row,
            t2: self.t2,
        }
    }
}

impl Consumer {
    /// O (normalised) to the dtype, stored pair by pair for rows below `seqlen_q`; the
    /// LSE by lane t = 0 of each quad when `lse` is not null.
    pub(super) fn epilogue(
        &self,
        b: &mut Builder,
        at: &Rows,
        out: &Out,
        (o, lse): (&AccTile, &[Reg<F32>]),
    ) {
        b.comment("-- epilogue: O and the LSE --");
        let (row, t2) = (at.row, at.t2);
        let bo = b.cvt_u64_u32(at.batch);
        let bo = b.mul_lo_u64(bo, out.o_batch);
        let ho = b.mul_wide_u32(at.head, out.o_head);
        let base = b.add_s64(bo, ho);
        let base = b.shl_b64(base, 1);
        let base = b.add_s64(out.o_ptr, base);
        let base = b.cvta_global(base);
        let col = b.mul_wide_u32(t2, 2u32);
        let base = b.add_s64(base, col);
        let lse_at = self.lse_rows(b, at, out);
        debug_assert_eq!(lse.len(), o.rows(), "generator bug: one LSE per row");
        for (r, &lse_r) in lse.iter().enumerate() {
            let rr = b.add_u32(row, AccTile::row_offset(r));
            let out_of = b.setp_u32(Cmp::Ge, rr, self.sq);
            let off = b.mul_wide_u32(rr, out.o_row);
            let off = b.shl_b64(off, 1);
            let at = b.add_s64(base, off);
            b.unless(out_of, |b| {
                for nt in 0..o.n_tiles() {
                    let [lo, hi] = o.pair(r, nt);
                    let w = b.pack(self.fmt, lo, hi);
                    b.st(
                        Space::Global,
                        Ty::B32,
                        Addr::Global(at, 16 * nt as i32),
                        &[w],
                    );
                }
            });
            Self::lse_store(b, lse_at, (rr, out_of), lse_r);
        }
    }

    /// Where the LSE goes: whether this thread skips it (no `lse`, or not lane t = 0 of
    /// its quad), and the generic address of the tile's (batch, head) row 0.
    fn lse_rows(&self, b: &mut Builder, at: &Rows, out: &Out) -> (Reg<Pred>, Reg<B64>) {
        let no_lse = b.setp_u64(Cmp::Eq, out.lse_ptr, 0i64);
        let other = b.setp_u32(Cmp::Ne, at.t2, 0u32);
        let skip_lse = b.or_pred(no_lse, other);
        // (batch * heads + head) * seqlen_q, in 64 bits: b * h * sq may pass 2^32
        let bh = b.mad_lo_u32(at.batch, out.heads, at.head);
        let lse_row0 = b.mul_wide_u32(bh, self.sq);
        let lse_row0 = b.shl_b64(lse_row0, 2);
        let lse_row0 = b.add_s64(out.lse_ptr, lse_row0);
        (skip_lse, b.cvta_global(lse_row0))
    }

    /// Row `rr`'s LSE `v`, unless skipped or `out_of` (past `seqlen_q`).
    fn lse_store(
        b: &mut Builder,
        (skip_lse, lse_row0): (Reg<Pred>, Reg<B64>),
        (rr, out_of): (Reg<B32>, Reg<Pred>),
        v: Reg<F32>,
    ) {
        let skip = b.or_pred(skip_lse, out_of);
        b.unless(skip, |b| {
            let a = b.mad_wide_u32(rr, 4u32, lse_row0);
            b.st(Space::Global, Ty::F32, Addr::Global(a, 0), &[v]);
        });
    }
}

impl Consumer {
    /// The TMA epilogue (`fwd::Variant::tma_store`): each warp writes its 16 rows of O
    /// (normalised, converted) with `stmatrix` into the warpgroup's 64-row stripe of the
    /// tile's Q slot `q_slot` (the tile `SmemTile` at `slot`: the warpgroup's S products,
    /// its only readers of that stripe, have landed), `fence.proxy.async`, the warpgroup
    /// meets at its named barrier, and its leader stores the stripe with one TMA box per
    /// 64 columns (rows past `seqlen_q` clipped by the map); the LSE, as
    /// [`Consumer::epilogue`] stores it, while the boxes are read; the leader waits until
    /// they are: only then may its warp release the slot (`release_q`). `at`: the tile's
    /// rows; `wg_row`, the warpgroup's first (the boxes' coordinate, read by `lead` only:
    /// the leader's own row is it).
    pub(super) fn epilogue_tma(
        &self,
        b: &mut Builder,
        (at, wg_row, lead): (&Rows, Reg<B32>, Reg<Pred>),
        out: &Out,
        (q_slot, slot, tid): (&SmemTile, Reg<B32>, Reg<B32>),
        (o, lse): (&AccTile, &[Reg<F32>]),
    ) {
        b.comment("-- epilogue: O by stmatrix into the Q slot, one TMA store, the LSE --");
        let tm_o = out
            .tm_o
            .expect("generator bug: a TMA epilogue without its map");
        let lane = b.special(Special::LaneId);
        let warp = b.shr_u32(tid, 5u32);
        let wg = b.shr_u32(warp, 2u32);
        let cw = b.sub_u32(wg, 1u32);
        // the warpgroup's stripe (its 64 rows of every panel), and this warp's 16 rows
        let stripe = b.mad_lo_u32(cw, WG_ROWS * ROW_BYTES, slot);
        let warp = b.and_b32(warp, 3u32);
        let rows = b.mad_lo_u32(warp, 16 * ROW_BYTES, stripe);
        let lanes = LdmLanes::new(b, &LDM_A, lane);
        for (kk, f) in o.as_a(b, self.fmt, 0).into_iter().enumerate() {
            let at = lanes.addr(b, rows, q_slot, 0, 2 * kk as u32);
            b.stmatrix(false, at, f);
        }
        b.fence_proxy_async();
        let bar = b.add_u32(cw, EPI_BAR);
        b.bar_sync_named(bar, 128);
        b.when(lead, false, |b| {
            for p in 0..q_slot.cols / 64 {
                let coords: Vec<Operand<B32>> = vec![
                    Operand::Imm(64 * p as i64),
                    at.head.into(),
                    wg_row.into(),
                    at.batch.into(),
                ];
                let off = q_slot.base + p * q_slot.rows * ROW_BYTES;
                b.tma_store(tm_o, coords, Addr::Shared(stripe, off as i32));
            }
            b.bulk_commit();
        });
        self.lse_stores(b, at, out, lse);
        if !self.release_late {
            b.when(lead, false, |b| b.bulk_wait(0, true));
        }
    }

    /// The rows' LSE (below `seqlen_q`), by lane t = 0 of each quad, when `lse` is not
    /// null.
    fn lse_stores(&self, b: &mut Builder, at: &Rows, out: &Out, lse: &[Reg<F32>]) {
        let lse_at = self.lse_rows(b, at, out);
        for (r, &lse_r) in lse.iter().enumerate() {
            let rr = b.add_u32(at.row, AccTile::row_offset(r));
            let out_of = b.setp_u32(Cmp::Ge, rr, self.sq);
            Self::lse_store(b, lse_at, (rr, out_of), lse_r);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::sm90::fwd::{Variant, module};
    use crate::kernels::sm90::fwd_ctx::Q_EMPTY;
    use crate::ptx::print;
    use crate::spec::{DType, Mask};

    /// The TMA epilogue's order in the PTX: every warp's `stmatrix`s, its
    /// `fence.proxy.async`, the warpgroup's 128-thread barrier, the leader's d / 64 box
    /// stores and their commit, the LSE; the slot's release waits for the next tile's
    /// first S (`release_late`): there, once S is issued, the leader's wait for the
    /// boxes to be read, and only then the warp's Q-empty arrival, before S is waited
    /// for; the CTA's last wait before it exits. The pair-store kernel has none of it and
    /// three maps.
    #[test]
    fn the_tma_epilogue_releases_q_after_the_store_has_read_it() {
        for (dtype, d, mask) in [
            (DType::Bf16, 64, Mask::Causal),
            (DType::F16, 128, Mask::Local),
        ] {
            let var = Variant::shipping_for(dtype, d, mask);
            assert!(var.tma_store, "the shipping kernels store O through TMA");
            let pairs = Variant {
                tma_store: false,
                ..var
            };
            let ptx = print::module(&module(var));
            assert_eq!(ptx.matches(".param .align 64 .b8").count(), 4, "d{d}");
            let epi = ptx
                .split("-- epilogue: O by stmatrix")
                .nth(1)
                .expect("the TMA epilogue");
            let at = |pat: &str| {
                epi.find(pat)
                    .unwrap_or_else(|| panic!("d{d}: `{pat}` missing:\n{epi}"))
            };
            let last_st = epi
                .rfind("stmatrix.sync.aligned.m8n8.x4")
                .expect("stmatrix");
            let order = [
                last_st,
                at("fence.proxy.async.shared::cta;"),
                at("bar.sync"),
                at("cp.async.bulk.tensor.4d.global.shared::cta"),
                at("cp.async.bulk.commit_group;"),
                at("st.global.f32"),
            ];
            assert!(order.is_sorted(), "d{d}: {order:?}\n{epi}");
            let tile_end = epi.split("-- first block").next().unwrap_or_default();
            assert!(!tile_end.contains("cp.async.bulk.wait_group.read"), "d{d}");
            let first = ptx
                .split("-- first block")
                .nth(1)
                .and_then(|f| f.split("-- blocks ").next())
                .expect("the first block");
            let fat = |pat: &str| {
                first
                    .find(pat)
                    .unwrap_or_else(|| panic!("d{d}: `{pat}` missing:\n{first}"))
            };
            let release = [
                fat("-- S = Q K^T --"),
                fat("cp.async.bulk.wait_group.read 0;"),
                fat(&format!("+{Q_EMPTY}];")),
                fat("wgmma.wait_group.sync.aligned 0;"),
            ];
            assert!(release.is_sorted(), "d{d}: {release:?}\n{first}");
            let bar = epi[order[2]..].lines().next().unwrap_or_default();
            assert!(
                bar.ends_with(", 128;"),
                "d{d}: the warpgroup's barrier: {bar}"
            );
            let stores = &epi[..order[4]];
            assert_eq!(
                stores.matches("stmatrix").count(),
                (d / 16) as usize,
                "d{d}"
            );
            let boxes: Vec<_> = stores
                .lines()
                .filter(|l| l.contains("cp.async.bulk.tensor"))
                .collect();
            assert_eq!(boxes.len(), (d / 64) as usize, "d{d}");
            assert!(
                boxes.iter().all(|l| l.trim_start().starts_with("@%p")),
                "d{d}"
            );
            let tail = ptx
                .rsplit("cp.async.bulk.wait_group 0;")
                .next()
                .expect("exit wait");
            assert!(
                tail.contains("ret;") && !tail.contains("cp.async.bulk"),
                "d{d}"
            );
            let plain = print::module(&module(pairs));
            assert!(
                !plain.contains("stmatrix") && !plain.contains("cp.async.bulk.tensor.4d.global")
            );
            assert_eq!(plain.matches(".param .align 64 .b8").count(), 3);
        }
    }
}
