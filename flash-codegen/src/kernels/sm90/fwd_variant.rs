//! Kernel layer, sm_90a: the first forward's variants ([`Variant`]: what `fwd::module`
//! builds, its name, launch geometry, scalar parameters and shared memory).

use super::fwd::{BASE_SCALARS, HEAD_DIMS, MAPS, MAPS_TST, SCALARS};
use super::fwd_chain::RECORD_BYTES;
use super::fwd_ctx::{Layout, WG_ROWS};
use super::fwd_sched::Grid;
use crate::ptx::Ty;
use crate::spec::{DType, Mask, Scores};

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
    /// The score transform between S and the mask: none, a softcap (`softcap`), ALiBi's
    /// bias (`alibi_slopes`; not with a window).
    pub scores: Scores,
    /// Of every 4 n-tiles of S, how many make their probabilities on the FMA pipe
    /// (`kernels::exp2`) instead of `ex2` (0..=4; name `_fx{k}` when not 0): relief for
    /// the multi-function unit under a softcap, whose `tanh` doubles its load
    /// ([`Variant::default_fma_exp2`]).
    pub fma_exp2: u32,
    /// With a softcap and bf16 (not `chained`): every row's probabilities relative to
    /// one fixed reference (the scores are bounded by the cap: `OnlineSoftmax::fixed`)
    /// instead of the running max, for caps where it fits (`cap * log2 e <= 82`; larger
    /// caps take the running max in the same kernel): no row max, vote or rescale per
    /// block (name `_fref`).
    pub fixed_ref: bool,
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
    /// The epilogue through shared memory and TMA: each consumer
    /// warpgroup writes its normalised O stripe with `stmatrix` into its stripe of the
    /// tile's Q slot and one thread stores it with `cp.async.bulk.tensor` through a fourth
    /// tensor map, `tm_o` (o's strides then multiples of 16 bytes, as q's), instead of
    /// each thread storing its pairs.
    pub tma_store: bool,
    /// With `dynamic` (not `chained`): the producer loads each next tile's Q once the
    /// rings hold the current tile's first two key blocks, not after all of them, so that
    /// the consumers find it landed at the tile edge (`fwd_dynamic::produce_claimed_ahead`).
    pub q_ahead: bool,
    /// With `window`: each masked key block checks only the window edges it crosses (the
    /// first visits the right edge, the last the left edge, a block crossing both both)
    /// instead of both edges on every masked block (name `_em`).
    pub edge_masks: bool,
    /// Bounded mbarrier waits that fail naming the barrier ([`crate::ptx::Builder::bound_waits`]).
    pub debug: bool,
}

impl Variant {
    /// Entry name:
    /// `fa3_fwd_d{D}_{dtype}[_causal|_local][_softcap|_alibi][_fx{k}][_fref][_ovl][_pp]_m{rows}[_pers|_dyn][_chain][_tst][_qa][_em]_sm90a[_debug]`.
    pub fn name(&self) -> String {
        let fx = match self.fma_exp2 {
            0 => String::new(),
            k => format!("_fx{k}"),
        };
        let fref = if self.fixed_ref { "_fref" } else { "" };
        let mask = format!("{}{}{fx}{fref}", self.mask().suffix(), self.scores.suffix());
        let ovl = if self.overlap { "_ovl" } else { "" };
        let pp = if self.pingpong { "_pp" } else { "" };
        let pers = match self.grid_kind() {
            Grid::Dynamic => "_dyn",
            Grid::Zigzag => "_pers",
            Grid::Plain => "",
        };
        let chain = if self.chained { "_chain" } else { "" };
        let tst = if self.tma_store { "_tst" } else { "" };
        let qa = if self.q_ahead { "_qa" } else { "" };
        let em = if self.edge_masks { "_em" } else { "" };
        let dbg = if self.debug { "_debug" } else { "" };
        format!(
            "fa3_fwd_d{}_{}{mask}{ovl}{pp}_m{}{pers}{chain}{tst}{qa}{em}_sm90a{dbg}",
            self.head_dim,
            self.dtype.name(),
            self.block_m()
        )
    }

    /// The configuration the runtime runs and `emit --all` writes: overlapped, pingpong,
    /// the default consumers, no debug build, the persistent grid with the dynamic
    /// scheduler (H100, session 26: 1.56x our sm80 over the FA2-paper rows against the
    /// plain grid's 1.51x, and up to 1.07x it on the short causal rows; docs/hopper.md),
    /// the epilogue through TMA (H200, session 31: sliding window 1024 at 8K 0.80 of the
    /// causal kernel's unmasked TFLOP/s against the pair stores' 0.75, window 256 0.45
    /// against 0.38; the plain rows 0.995-1.021 of the pair stores';
    /// docs/bench/sm90_qa_v1_h200).
    pub fn shipping(dtype: DType, head_dim: u32, causal: bool) -> Variant {
        Variant {
            dtype,
            head_dim,
            causal,
            window: false,
            scores: Scores::Plain,
            fma_exp2: 0,
            fixed_ref: false,
            overlap: true,
            pingpong: true,
            consumers: Self::default_consumers(head_dim),
            persistent: true,
            dynamic: true,
            chained: false,
            tma_store: true,
            q_ahead: false,
            edge_masks: false,
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

    /// [`Variant::shipping_for`] with score transform `scores` (and its default FMA share
    /// of the softmax's `ex2`, [`Variant::default_fma_exp2`]).
    pub fn shipping_scored(dtype: DType, head_dim: u32, mask: Mask, scores: Scores) -> Variant {
        Variant {
            scores,
            fma_exp2: Self::default_fma_exp2(scores),
            ..Self::shipping_for(dtype, head_dim, mask)
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

    /// The FMA share of the softmax's `ex2` ([`Variant::fma_exp2`]) a kernel of `scores`
    /// runs by default: 0 (every probability by `ex2`) until a share is measured faster
    /// on a GPU.
    pub fn default_fma_exp2(_scores: Scores) -> u32 {
        0
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

    /// The tensor-map parameters, in order: [`MAPS`], and `tm_o` for the TMA epilogue.
    pub fn maps(&self) -> &'static [&'static str] {
        if self.tma_store { &MAPS_TST } else { &MAPS }
    }

    /// The scalar parameters, in order ([`SCALARS`]: the window's bounds for a window,
    /// `tile_counter` for the dynamic scheduler only).
    pub fn scalars(&self) -> Vec<(&'static str, Ty)> {
        let (base, rest) = SCALARS.split_at(BASE_SCALARS);
        let (window, rest) = rest.split_at(2);
        let (softcap, rest) = rest.split_at(1);
        let (alibi, counter) = rest.split_at(2);
        let mut v = base.to_vec();
        if self.window {
            v.extend_from_slice(window);
        }
        match self.scores {
            Scores::Plain => {}
            Scores::Softcap => v.extend_from_slice(softcap),
            Scores::Alibi => v.extend_from_slice(alibi),
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
    pub(super) fn layout(&self) -> Layout {
        Layout::new(self.head_dim, self.block_m(), 1 + self.persistent as u32)
    }

    /// Registers per thread after `setmaxnreg`: (producer, consumer), FA3's split of the
    /// 64K-register file.
    pub(super) fn registers(&self) -> (u32, u32) {
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
    /// and overlapped + pingpong schedules (the last also persistent: static, dynamic,
    /// the dynamic one chained), all with the pair stores, release and debug builds; at
    /// d64 with two consumers too (beside the default three); the shipping kernels (the
    /// TMA epilogue), the sliding window's also with two consumers at d64 and with the
    /// pair stores; every mask's with `q_ahead`, and chained (with the TMA epilogue); the
    /// window's with `edge_masks`; softcap
    /// (every mask) and
    /// ALiBi (no mask or causal) on the shipping schedule and tiles, the softcap also with
    /// 1 and 2 of every 4 n-tiles' `ex2`s on the FMA pipe (`fma_exp2`) and, in bf16, on
    /// a fixed reference (`fixed_ref`; with 1 in 4 `ex2`s on the FMA pipe too).
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
                            scores: Scores::Plain,
                            fma_exp2: 0,
                            fixed_ref: false,
                            overlap,
                            pingpong,
                            consumers,
                            persistent,
                            dynamic,
                            chained,
                            tma_store: false,
                            q_ahead: false,
                            edge_masks: false,
                            debug,
                        }));
                    }
                }
                // the shipping kernels: the window with each consumer count, no mask and
                // causal (their pair-store twins are the schedules' last but one above)
                for consumers in wgs_of(head_dim) {
                    let ship = Variant {
                        consumers,
                        ..Self::shipping_for(dtype, head_dim, Mask::Local)
                    };
                    v.extend([false, true].map(|debug| Variant { debug, ..ship }));
                }
                for mask in [Mask::None, Mask::Causal] {
                    let ship = Self::shipping_for(dtype, head_dim, mask);
                    v.extend([false, true].map(|debug| Variant { debug, ..ship }));
                }
                // the window with the pair stores; each mask with each next tile's Q
                // loaded early
                let pairs = Variant {
                    tma_store: false,
                    ..Self::shipping_for(dtype, head_dim, Mask::Local)
                };
                v.extend([false, true].map(|debug| Variant { debug, ..pairs }));
                for mask in [Mask::None, Mask::Causal, Mask::Local] {
                    let ship = Variant {
                        q_ahead: true,
                        ..Self::shipping_for(dtype, head_dim, mask)
                    };
                    v.extend([false, true].map(|debug| Variant { debug, ..ship }));
                    // the tile edges chained, O through TMA
                    let chain = Variant {
                        chained: true,
                        ..Self::shipping_for(dtype, head_dim, mask)
                    };
                    v.extend([false, true].map(|debug| Variant { debug, ..chain }));
                }
                // the window with one mask pass per edge crossed
                let em = Variant {
                    edge_masks: true,
                    ..Self::shipping_for(dtype, head_dim, Mask::Local)
                };
                v.extend([false, true].map(|debug| Variant { debug, ..em }));
                for (scores, mask) in Self::SCORED {
                    let ship = Self::shipping_scored(dtype, head_dim, mask, scores);
                    v.extend([false, true].map(|debug| Variant { debug, ..ship }));
                    // the softcap's softmax with a quarter or half of its `ex2`s on the FMA
                    // pipe (release builds only: the same barriers as the builds above)
                    if scores == Scores::Softcap {
                        v.extend([1, 2].map(|fma_exp2| Variant { fma_exp2, ..ship }));
                        // bf16's softcap on one fixed reference (where the cap fits)
                        if dtype == DType::Bf16 {
                            let fixed = Variant {
                                fixed_ref: true,
                                ..ship
                            };
                            v.extend([false, true].map(|debug| Variant { debug, ..fixed }));
                            // with a quarter of the `ex2`s on the FMA pipe (the `tanh`s
                            // and `ex2`s, one stream, bound by the multi-function unit)
                            v.push(Variant {
                                fma_exp2: 1,
                                ..fixed
                            });
                        }
                    }
                }
            }
        }
        v
    }

    /// The score transforms and the masks they come with (ALiBi without a window, as the
    /// sm_80 kernels).
    pub const SCORED: [(Scores, Mask); 5] = [
        (Scores::Softcap, Mask::None),
        (Scores::Softcap, Mask::Causal),
        (Scores::Softcap, Mask::Local),
        (Scores::Alibi, Mask::None),
        (Scores::Alibi, Mask::Causal),
    ];
}

/// The consumer counts built at `head_dim`: the default first.
fn wgs_of(head_dim: u32) -> Vec<u32> {
    if head_dim == 64 { vec![3, 2] } else { vec![2] }
}
