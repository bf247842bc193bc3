//! Kernel layer, sm_90a: the first Hopper forward (issue 22, step 2; not yet in the spec
//! key: built per [`Variant`] here and launched by `FlashAttention::launch_fwd_sm90`).
//! FA3's roles:
//!
//! - One CTA per (query block, head, batch). Warpgroup 0 is the producer (`setmaxnreg.dec`):
//!   one thread loads Q once and K, V through 2-stage rings, each stage behind a full
//!   barrier (TMA bytes) and an empty one (one arrival per consumer).
//! - Two or three consumer warpgroups (`setmaxnreg.inc`) of 64 query rows each (128 or 192
//!   rows per CTA). Per key block of 128: S = Q K^T (SS `wgmma`, K-major), release K, mask
//!   (sequence end, causal diagonal bottom-right aligned, or a sliding window: only the
//!   key blocks of the tile's windows visited), the shared `OnlineSoftmax` on
//!   the `AccTile`, P by `as_a`, O += P V (RS `wgmma` against V MN-major), release V;
//!   serially, or with S of the next block in flight beside P V (`overlap`), and with the
//!   consumers issuing their products in turn (`pingpong`).
//! - Epilogue: O /= l, O stored row by row from the accumulator layout, the LSE.
//!
//! Parameters: the q, k, v tensor maps (4D `[b, s, h, d]`, boxes `{64, 1, rows, 1}` with
//! `rows` = the CTA's query rows for Q and 128 for K, V; the 128-byte swizzle), then
//! [`SCALARS`].

use super::EntryParams;
pub use super::fwd_variant::Variant;

use super::fwd_consumer::Consumer;
pub use super::fwd_ctx::BLOCK_N;
use super::fwd_ctx::{Ctx, QSlot};
use super::fwd_epilogue::Out;
use super::fwd_producer::drain;
use super::fwd_sched::{Grid, Sched, Tile};
use super::fwd_turn::Turn;
use crate::kernels::half_fmt;
use crate::kernels::mask::{KeyRule, Window};
use crate::kernels::scores::{ScoreTransform, Slopes};
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::{B32, Builder, Cmp, Entry, LaunchBounds, Module, Reg, Special, Target, Ty};
use crate::spec::{DType, Scores};
use crate::tile::smem::SmemTile;

/// Tensor-map parameters, in order.
pub const MAPS: [&str; 3] = ["tm_q", "tm_k", "tm_v"];

/// Tensor-map parameters of the TMA epilogue's kernels (`Variant::tma_store`): `tm_o`, o's
/// map (Q's layout and swizzle, boxes `{64, 1, 64, 1}`), after q's, k's and v's.
pub const MAPS_TST: [&str; 4] = ["tm_q", "tm_k", "tm_v", "tm_o"];

/// Rows of `tm_o`'s box: one consumer warpgroup's stripe.
pub const O_BOX_ROWS: u32 = super::fwd_ctx::WG_ROWS;

/// Scalar parameters after the maps: `o` (u64), `lse` (u64, 0 = none: `[b, h, sq]` f32),
/// u32 `seqlen_q`, `seqlen_k`, `group` (heads / heads_k), `heads`, `o_row` and `o_head`
/// (o's strides in elements), u64 `o_batch`, f32 `scale_log2` (softmax scale * log2 e),
/// u32 `batch` (the batch size: the persistent kernel's tile count); a sliding window's
/// kernels then u32 `window_left` and `window_right` (keys before and after the diagonal
/// a query sees, `u32::MAX` unbounded); a softcap's kernels f32 `softcap` (the cap > 0);
/// ALiBi's u64 `alibi_slopes` (f32 `[heads]` or `[batch, heads]`) and u32
/// `alibi_batch_stride` (0 or heads); the dynamic scheduler's kernels last u64
/// `tile_counter` (a zeroed global `u32[2]`, left zeroed): [`Variant::scalars`].
pub const SCALARS: [(&str, Ty); 17] = [
    ("o", Ty::U64),
    ("lse", Ty::U64),
    ("seqlen_q", Ty::U32),
    ("seqlen_k", Ty::U32),
    ("group", Ty::U32),
    ("heads", Ty::U32),
    ("o_row", Ty::U32),
    ("o_head", Ty::U32),
    ("o_batch", Ty::U64),
    ("scale_log2", Ty::F32),
    ("batch", Ty::U32),
    ("window_left", Ty::U32),
    ("window_right", Ty::U32),
    ("softcap", Ty::F32),
    ("alibi_slopes", Ty::U64),
    ("alibi_batch_stride", Ty::U32),
    ("tile_counter", Ty::U64),
];

/// The scalars every variant takes (`SCALARS` up to `batch`).
pub(super) const BASE_SCALARS: usize = 11;

/// Head dims the kernel takes.
pub const HEAD_DIMS: [u32; 2] = [64, 128];

/// The module of variant `var` (one entry, [`Variant::name`]).
pub fn module(var: Variant) -> Module {
    let Variant {
        dtype,
        head_dim: d,
        causal,
        window,
        scores,
        fma_exp2,
        fixed_ref,
        overlap,
        pingpong,
        consumers,
        persistent,
        dynamic,
        chained,
        tma_store,
        q_ahead,
        edge_masks,
        debug,
    } = var;
    assert!(
        fma_exp2 <= 4,
        "generator bug: an FMA share of {fma_exp2} in 4"
    );
    assert!(
        !(causal && window),
        "generator bug: a window variant takes the causal mask as its window (-1, 0)"
    );
    assert!(HEAD_DIMS.contains(&d), "generator bug: sm90 forward d{d}");
    assert!(
        consumers == 2 || (consumers == 3 && d == 64),
        "generator bug: sm90 forward d{d} with {consumers} consumers"
    );
    assert!(
        persistent || !dynamic,
        "generator bug: the dynamic scheduler runs on the persistent grid"
    );
    assert!(
        !chained || (persistent && overlap && pingpong),
        "generator bug: chained tiles need the persistent, overlapped, pingpong schedule"
    );
    assert!(
        !q_ahead || (dynamic && !chained),
        "generator bug: the next tile's Q early needs the dynamic scheduler, unchained"
    );
    assert!(
        !edge_masks || window,
        "generator bug: masks per window edge without a window"
    );
    assert!(
        !fixed_ref || (scores == Scores::Softcap && dtype == DType::Bf16 && !chained),
        "generator bug: a fixed softmax reference needs a softcap's bounded scores, bf16 \
         probabilities and unchained tiles"
    );
    let block_m = var.block_m();
    let (fmt, lay) = (half_fmt(dtype), var.layout());
    let (producer_regs, consumer_regs) = var.registers();
    let mut b = Builder::new();
    if debug {
        b.bound_waits(1 << 22);
    }
    let ep = EntryParams::load(&mut b, var.maps(), &var.scalars());
    let tm = ep.maps.clone();
    let (o_ptr, lse_ptr, sq, sk) = (ep.u64(0), ep.u64(1), ep.u32(2), ep.u32(3));
    let (group, heads, o_row, o_head) = (ep.u32(4), ep.u32(5), ep.u32(6), ep.u32(7));
    let (o_batch, scale_log2, batches) = (ep.u64(8), ep.f32(9), ep.u32(10));
    let at = |name| {
        var.scalar_index(name)
            .expect("generator bug: a variant's scalar")
    };
    let counter = var.takes_tile_counter().then(|| ep.u64(at("tile_counter")));
    // the bounds clamped as `KeyRule::load` clamps them: every sum stays within i32
    let rule = match (causal, window) {
        (_, true) => KeyRule::Local(Window {
            left: b.min_u32(ep.u32(at("window_left")), sk),
            right: b.min_u32(ep.u32(at("window_right")), sq),
        }),
        (true, false) => KeyRule::Causal,
        (false, false) => KeyRule::All,
    };
    let (transform, softmax_scale) = match scores {
        Scores::Softcap => {
            let (t, s) = ScoreTransform::softcap(&mut b, ep.f32(at("softcap")), scale_log2);
            (Some(t), s)
        }
        Scores::Plain | Scores::Alibi => (None, scale_log2),
    };
    let slopes = (scores == Scores::Alibi).then(|| Slopes {
        ptr: ep.u64(at("alibi_slopes")),
        batch_stride: ep.u32(at("alibi_batch_stride")),
    });

    let tid = b.special(Special::TidX);
    let smem = b.smem_base();
    let first = b.setp_u32(Cmp::Eq, tid, 0u32);
    let grid = var.grid_kind();
    let sched = Sched {
        grid,
        rule,
        block_m,
        head_dim: d,
        counter,
        sq,
        sk,
        heads,
        group,
        batches,
    };

    b.comment("-- barriers: Q full; per stage K full / empty, V full / empty; Q empty --");
    b.when(first, false, |b| {
        lay.init_barriers(b, smem, (consumers, persistent))
    });
    b.fence_mbarrier_init();
    b.bar_sync();
    let wg = b.shr_u32(tid, 7);
    let producer = b.setp_u32(Cmp::Eq, wg, 0u32);
    let ctx = |tile: &Tile, it0: Reg<B32>| Ctx {
        d,
        consumers,
        lay,
        smem,
        n_blocks: tile.n_blocks,
        n_masked: tile.n_masked,
        window: tile.window,
        head: tile.head,
        kv_head: tile.kv_head,
        batch: tile.batch,
        it0,
        q_landed: grid == Grid::Dynamic,
    };
    b.if_else_uniform(
        producer,
        |b| {
            b.setmaxnreg(false, producer_regs);
            let others = b.setp_u32(Cmp::Ne, tid, 0u32);
            b.unless(others, |b| {
                let total = if q_ahead {
                    let load_q = |b: &mut Builder, tile: &Tile, slot: &QSlot| {
                        // (a Q load uses no ring position: any `it0`)
                        ctx(tile, tile.m0).load_q(b, &tm, tile.m0, slot);
                    };
                    sched.produce_claimed_ahead(b, (smem, &lay), load_q, |b, tile, at, ahead| {
                        ctx(tile, at.it0).produce_ahead(b, &tm, ahead);
                    })
                } else {
                    sched.produce_tiles(b, (smem, &lay), |b, tile, at, slot| {
                        ctx(tile, at.it0).produce(b, &tm, tile.m0, slot);
                    })
                };
                drain(b, (smem, lay.tile_bytes), total);
            });
        },
        |b| {
            b.setmaxnreg(true, consumer_regs);
            let c = Consumer {
                fmt,
                fma_exp2,
                edge_masks,
                rule,
                scale_log2,
                softmax_scale,
                transform,
                raw_max: consumers >= 3,
                release_late: tma_store && persistent && overlap && !chained,
                slopes,
                fixed_ref: fixed_ref.then(|| {
                    let t = transform.expect("a softcap's transform");
                    let bound = t.scaled_bound(softmax_scale);
                    let r = OnlineSoftmax::fixed_reference(b, bound);
                    (OnlineSoftmax::fixed_fits(b, bound), r)
                }),
                sq,
                sk,
            };
            let turn = pingpong.then(|| Turn::first(b, wg, consumers));
            let out = Out {
                o_ptr,
                lse_ptr,
                o_row,
                o_head,
                o_batch,
                heads,
                tm_o: tma_store.then(|| tm[3]),
            };
            let q_tile = SmemTile::new(lay.q, block_m, d);
            if chained {
                let st = (smem, &lay, &out, tma_store.then_some(&q_tile));
                c.consume_chained(b, &sched, st, ctx, (tid, wg, turn));
            } else {
                sched.consume_tiles(b, (smem, &lay), |b, tile, at| {
                    let ctx = ctx(tile, at.it0);
                    let (o, lse, w) = c.consume(b, &ctx, (tid, wg, tile.m0), (overlap, turn), at.j);
                    if tma_store {
                        // O staged in the tile's Q slot: released once the store has read it
                        let slot = QSlot::of(b, (smem, &lay), at.j);
                        let st = (&q_tile, slot.smem, tid);
                        c.epilogue_tma(b, (&w.rows(&ctx), w.wg_row, w.lead), &out, st, (&o, &lse));
                        if persistent && !c.release_late {
                            c.release_q(b, &w);
                        }
                    } else {
                        if persistent {
                            c.release_q(b, &w);
                        }
                        c.epilogue(b, &w.rows(&ctx), &out, (&o, &lse));
                    }
                });
            }
            if tma_store {
                // the CTA's TMA stores complete before it exits
                let lead = Consumer::leader(b, tid);
                b.when(lead, false, |b| b.bulk_wait(0, false));
            }
        },
    );
    let entry: Entry = b.finish(
        var.name(),
        ep.params,
        LaunchBounds {
            max_threads: Some(var.threads()),
            min_ctas_per_sm: Some(1),
            // `.reqntid`: with the CTA size exact, ptxas treats the %tid-derived
            // warpgroup index as warp-uniform and keeps the ring's stage and descriptor
            // arithmetic on the uniform datapath (docs/hopper.md, Session 27).
            exact_threads: true,
        },
    );
    Module {
        target: Target::Sm90a,
        entries: vec![entry],
    }
}
