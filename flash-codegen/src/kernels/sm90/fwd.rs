//! Kernel layer, sm_90a: the first Hopper forward (issue 22, step 2; not yet in the spec
//! key: built per [`Variant`] here and launched by `FlashAttention::launch_fwd_sm90`).
//! FA3's roles:
//!
//! - One CTA per (query block, head, batch). Warpgroup 0 is the producer (`setmaxnreg.dec`):
//!   one thread loads Q once and K, V through 2-stage rings, each stage behind a full
//!   barrier (TMA bytes) and an empty one (one arrival per consumer).
//! - Two or three consumer warpgroups (`setmaxnreg.inc`) of 64 query rows each (128 or 192
//!   rows per CTA). Per key block of 128: S = Q K^T (SS `wgmma`, K-major), release K, mask
//!   (sequence end, causal diagonal, bottom-right aligned), the shared `OnlineSoftmax` on
//!   the `AccTile`, P by `as_a`, O += P V (RS `wgmma` against V MN-major), release V;
//!   serially, or with S of the next block in flight beside P V (`overlap`), and with the
//!   consumers issuing their products in turn (`pingpong`).
//! - Epilogue: O /= l, O stored row by row from the accumulator layout, the LSE.
//!
//! Parameters: the q, k, v tensor maps (4D `[b, s, h, d]`, boxes `{64, 1, rows, 1}` with
//! `rows` = the CTA's query rows for Q and 128 for K, V; the 128-byte swizzle), then
//! [`SCALARS`].

use super::EntryParams;
use super::fwd_chain::RECORD_BYTES;
use super::fwd_consumer::Consumer;
pub use super::fwd_ctx::BLOCK_N;
use super::fwd_ctx::{Ctx, Layout, WG_ROWS};
use super::fwd_epilogue::Out;
use super::fwd_producer::drain;
use super::fwd_sched::{Grid, Sched, Tile};
use crate::kernels::half_fmt;
use crate::kernels::mask::Window;
use crate::ptx::{B32, Builder, Cmp, Entry, LaunchBounds, Module, Reg, Special, Target, Ty};
use crate::spec::{DType, Mask};

/// Tensor-map parameters, in order.
pub const MAPS: [&str; 3] = ["tm_q", "tm_k", "tm_v"];

/// Scalar parameters after the maps: `o` (u64), `lse` (u64, 0 = none: `[b, h, sq]` f32),
/// u32 `seqlen_q`, `seqlen_k`, `group` (heads / heads_k), `heads`, `o_row` and `o_head`
/// (o's strides in elements), u64 `o_batch`, f32 `scale_log2` (softmax scale * log2 e),
/// u32 `batch` (the batch size: the persistent kernel's tile count); a sliding window's
/// kernels then u32 `window_left` and `window_right` (keys before and after the diagonal
/// a query sees, `u32::MAX` unbounded); the dynamic scheduler's kernels last u64
/// `tile_counter` (a zeroed global `u32[2]`, left zeroed): [`Variant::scalars`].
pub const SCALARS: [(&str, Ty); 14] = [
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
    ("tile_counter", Ty::U64),
];

/// The scalars every variant takes (`SCALARS` up to `batch`).
const BASE_SCALARS: usize = 11;

/// Head dims the kernel takes.
pub const HEAD_DIMS: [u32; 2] = [64, 128];

/// One variant of the forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Element type.
    pub dtype: DType,
    /// 64 or 128 ([`HEAD_DIMS`]).
    pub head_dim: u32,
    /// Causal mask, bottom-right aligned.
    pub causal: bool,
    /// A sliding window (not with `causal`): query i sees keys i + sk - sq - left ..=
    /// i + sk - sq + right, the bounds runtime parameters; key blocks wholly outside a
    /// tile's windows are not visited.
    pub window: bool,
    /// FA3's intra-warpgroup overlap (S of the next block beside P V of this one).
    pub overlap: bool,
    /// FA3's scheduler barrier: the consumers issue their GEMMs in turn, so one's softmax
    /// runs under the others' products.
    pub pingpong: bool,
    /// Consumer warpgroups, 64 query rows each (2 or 3; [`Variant::default_consumers`]).
    pub consumers: u32,
    /// A persistent grid (one CTA per SM, [`Variant::grid`]) walking the tiles in a
    /// static zigzag (`fwd_sched`), Q double-buffered.
    pub persistent: bool,
    /// With `persistent`: the tiles claimed from a counter instead, in L2-sized head
    /// groups, causal longest first (`fwd_dynamic`; the `tile_counter` parameter).
    pub dynamic: bool,
    /// With `persistent`, `overlap` and `pingpong`: the tile edges pipelined, each tile's
    /// last P V issued beside the next tile's first S (`fwd_chain`).
    pub chained: bool,
    /// Bounded mbarrier waits that fail naming the barrier ([`Builder::bound_waits`]).
    pub debug: bool,
}

impl Variant {
    /// Entry name:
    /// `fa3_fwd_d{D}_{dtype}[_causal|_local][_ovl][_pp]_m{rows}[_pers|_dyn][_chain]_sm90a[_debug]`.
    pub fn name(&self) -> String {
        let mask = self.mask().suffix();
        let ovl = if self.overlap { "_ovl" } else { "" };
        let pp = if self.pingpong { "_pp" } else { "" };
        let pers = match self.grid_kind() {
            Grid::Dynamic => "_dyn",
            Grid::Zigzag => "_pers",
            Grid::Plain => "",
        };
        let chain = if self.chained { "_chain" } else { "" };
        let dbg = if self.debug { "_debug" } else { "" };
        format!(
            "fa3_fwd_d{}_{}{mask}{ovl}{pp}_m{}{pers}{chain}_sm90a{dbg}",
            self.head_dim,
            self.dtype.name(),
            self.block_m()
        )
    }

    /// The configuration the runtime runs and `emit --all` writes: overlapped, pingpong,
    /// the default consumers, no debug build, the persistent grid with the dynamic
    /// scheduler (H100, session 26: 1.56x our sm80 over the FA2-paper rows against the
    /// plain grid's 1.51x, and up to 1.07x it on the short causal rows; docs/hopper.md).
    pub fn shipping(dtype: DType, head_dim: u32, causal: bool) -> Variant {
        Variant {
            dtype,
            head_dim,
            causal,
            window: false,
            overlap: true,
            pingpong: true,
            consumers: Self::default_consumers(head_dim),
            persistent: true,
            dynamic: true,
            chained: false,
            debug: false,
        }
    }

    /// [`Variant::shipping`] of `mask` (a sliding window's too).
    pub fn shipping_for(dtype: DType, head_dim: u32, mask: Mask) -> Variant {
        Variant {
            window: mask == Mask::Local,
            ..Self::shipping(dtype, head_dim, mask == Mask::Causal)
        }
    }

    /// The mask the variant computes.
    pub fn mask(&self) -> Mask {
        match (self.causal, self.window) {
            (true, _) => Mask::Causal,
            (false, true) => Mask::Local,
            (false, false) => Mask::None,
        }
    }

    /// FA3's choice: three consumers (192 query rows) at d64, where a warpgroup's
    /// registers leave room for a third; two at d128.
    pub fn default_consumers(head_dim: u32) -> u32 {
        if head_dim <= 64 { 3 } else { 2 }
    }

    /// Query rows per CTA.
    pub fn block_m(&self) -> u32 {
        self.consumers * WG_ROWS
    }

    /// Threads per CTA: the producer warpgroup and the consumers.
    pub fn threads(&self) -> u32 {
        128 * (1 + self.consumers)
    }

    /// The launch grid for `seqlen_q` queries, `heads` and `batch` on a GPU of `sms`
    /// multiprocessors: (query blocks, heads, batch), or, persistent, one CTA per SM up to
    /// the tile count. None when a count passes u32.
    pub fn grid(&self, seqlen_q: u64, heads: u64, batch: u64, sms: u32) -> Option<(u32, u32, u32)> {
        let m_blocks = seqlen_q.div_ceil(self.block_m() as u64);
        if self.persistent {
            let tiles = m_blocks.checked_mul(heads)?.checked_mul(batch)?;
            // the claims run to `tiles + grid - 1`
            u32::try_from(tiles.checked_add(sms as u64)?).ok()?;
            return Some((tiles.min(sms.max(1) as u64) as u32, 1, 1));
        }
        let u = |x: u64| u32::try_from(x).ok();
        Some((u(m_blocks)?, u(heads)?, u(batch)?))
    }

    /// Dynamic shared memory: the layout, and for chained tiles the per-thread records
    /// after it (`fwd_chain::RECORD_BYTES` per thread).
    pub fn smem_bytes(&self) -> u32 {
        self.layout().bytes() + self.chained as u32 * RECORD_BYTES * self.threads()
    }

    /// How the CTAs find their tiles (`dynamic` counts on the persistent grid only).
    pub(super) fn grid_kind(&self) -> Grid {
        match (self.persistent, self.dynamic) {
            (false, _) => Grid::Plain,
            (true, false) => Grid::Zigzag,
            (true, true) => Grid::Dynamic,
        }
    }

    /// Whether the kernel takes the `tile_counter` parameter (the dynamic scheduler's).
    pub fn takes_tile_counter(&self) -> bool {
        self.grid_kind() == Grid::Dynamic
    }

    /// The scalar parameters, in order ([`SCALARS`]: the window's bounds for a window,
    /// `tile_counter` for the dynamic scheduler only).
    pub fn scalars(&self) -> Vec<(&'static str, Ty)> {
        let (base, rest) = SCALARS.split_at(BASE_SCALARS);
        let (window, counter) = rest.split_at(2);
        let mut v = base.to_vec();
        if self.window {
            v.extend_from_slice(window);
        }
        if self.takes_tile_counter() {
            v.extend_from_slice(counter);
        }
        v
    }

    /// The position of scalar `name` among [`Variant::scalars`].
    pub fn scalar_index(&self, name: &str) -> Option<usize> {
        self.scalars().iter().position(|(n, _)| *n == name)
    }

    /// The shared-memory layout: two Q slots when persistent.
    fn layout(&self) -> Layout {
        Layout::new(self.head_dim, self.block_m(), 1 + self.persistent as u32)
    }

    /// Registers per thread after `setmaxnreg`: (producer, consumer), FA3's split of the
    /// 64K-register file.
    fn registers(&self) -> (u32, u32) {
        if self.consumers == 2 {
            (24, 240)
        } else {
            (32, 160)
        }
    }

    /// The schedules (overlap, pingpong, persistent, dynamic, chained): serial,
    /// overlapped, overlapped + pingpong, that on the persistent grid (static, dynamic),
    /// the dynamic one with its tile edges chained.
    pub const SCHEDULES: [(bool, bool, bool, bool, bool); 6] = [
        (false, false, false, false, false),
        (true, false, false, false, false),
        (true, true, false, false, false),
        (true, true, true, false, false),
        (true, true, true, true, false),
        (true, true, true, true, true),
    ];

    /// Every variant: both dtypes, d64 and d128, causal or not, the serial, overlapped
    /// and overlapped + pingpong schedules (the last also persistent: static, dynamic),
    /// release and debug builds; at d64 with two consumers too (beside the default
    /// three); the sliding window on the shipping schedule.
    pub fn all() -> Vec<Variant> {
        let mut v = Vec::new();
        for dtype in [DType::F16, DType::Bf16] {
            for head_dim in HEAD_DIMS {
                for (consumers, causal) in wgs_of(head_dim)
                    .into_iter()
                    .flat_map(|w| [(w, false), (w, true)])
                {
                    for (overlap, pingpong, persistent, dynamic, chained) in Self::SCHEDULES {
                        v.extend([false, true].map(|debug| Variant {
                            dtype,
                            head_dim,
                            causal,
                            window: false,
                            overlap,
                            pingpong,
                            consumers,
                            persistent,
                            dynamic,
                            chained,
                            debug,
                        }));
                    }
                }
                for consumers in wgs_of(head_dim) {
                    let ship = Variant {
                        consumers,
                        ..Self::shipping_for(dtype, head_dim, Mask::Local)
                    };
                    v.extend([false, true].map(|debug| Variant { debug, ..ship }));
                }
            }
        }
        v
    }
}

/// The consumer counts built at `head_dim`: the default first.
fn wgs_of(head_dim: u32) -> Vec<u32> {
    if head_dim == 64 { vec![3, 2] } else { vec![2] }
}

/// The module of variant `var` (one entry, [`Variant::name`]).
pub fn module(var: Variant) -> Module {
    let Variant {
        dtype,
        head_dim: d,
        causal,
        window,
        overlap,
        pingpong,
        consumers,
        persistent,
        dynamic,
        chained,
        debug,
    } = var;
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
    let block_m = var.block_m();
    let (fmt, lay) = (half_fmt(dtype), var.layout());
    let (producer_regs, consumer_regs) = var.registers();
    let mut b = Builder::new();
    if debug {
        b.bound_waits(1 << 22);
    }
    let ep = EntryParams::load(&mut b, &MAPS, &var.scalars());
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
    let win = window.then(|| Window {
        left: b.min_u32(ep.u32(at("window_left")), sk),
        right: b.min_u32(ep.u32(at("window_right")), sq),
    });

    let tid = b.special(Special::TidX);
    let smem = b.smem_base();
    let first = b.setp_u32(Cmp::Eq, tid, 0u32);
    let grid = var.grid_kind();
    let sched = Sched {
        grid,
        causal,
        window: win,
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
                let total = sched.produce_tiles(b, (smem, &lay), |b, tile, at, slot| {
                    ctx(tile, at.it0).produce(b, &tm, tile.m0, slot);
                });
                drain(b, (smem, lay.tile_bytes), total);
            });
        },
        |b| {
            b.setmaxnreg(true, consumer_regs);
            let c = Consumer {
                fmt,
                causal,
                window: win,
                scale_log2,
                sq,
                sk,
            };
            let turn = pingpong.then(|| c.first_turn(b, wg, consumers));
            let out = Out {
                o_ptr,
                lse_ptr,
                o_row,
                o_head,
                o_batch,
                heads,
            };
            if chained {
                c.consume_chained(b, &sched, (smem, &lay, &out), ctx, (tid, wg, turn));
            } else {
                sched.consume_tiles(b, (smem, &lay), |b, tile, at| {
                    let ctx = ctx(tile, at.it0);
                    let (o, lse, w) = c.consume(b, &ctx, (tid, wg, tile.m0), (overlap, turn), at.j);
                    if persistent {
                        c.release_q(b, &w);
                    }
                    c.epilogue(b, &w.rows(&ctx), &out, (&o, &lse));
                });
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
