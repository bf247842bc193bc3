//! Spec layer: the sm_80 tile table, one row per (pass, head dim) and the long and
//! compact rows. Each row says why it is shaped as it is; the measurements behind the
//! choices are in docs/performance.md ("Ideas tried").

use super::Sm80Layout::{Exchange, ExchangeLatePrefetch, KeySplit, Resident};
use super::{Sm80Tiles, tc};

/// The forward rows: head dim -> (block_m, block_n, warps, stages, sweeps). Each warp
/// owns block_m / warps query rows (one or two m16 tiles): two tiles share every K/V
/// fragment read from shared memory, halving ldmatrix traffic per mma; above d160 the O
/// accumulator (d/2 f32 per m-tile per thread) only fits with one. Resident Q fragments
/// where the registers allow it (d32, d64, d192). d224 and d256 take FA2's 64x64 with one
/// K and one V buffer taking turns (stages = 1), which beats 64x32 double-buffered.
/// d256 runs the exchange layout (`kernels::sm80::fwd_exchange`): pairs of warps split
/// each key block and the head dim, so every K, V and Q fragment feeds two m-tiles (21%
/// fewer shared-memory bytes per mma), for 104.5 KiB of shared memory, two CTAs per SM
/// on H100/H200; GPUs with less per block run [`FWD_COMPACT_TILES`]. The others stay at
/// or below 96 KiB, so they run on RTX 30/40 (99 KiB per block).
#[rustfmt::skip]
pub(crate) const FWD_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(128, 64, 4, 2, 1).with(Resident)),
    (64, tc(128, 64, 4, 2, 1).with(Resident)),
    (96, tc(128, 64, 4, 2, 1)),
    (128, tc(128, 32, 4, 2, 1)),
    (160, tc(128, 16, 4, 2, 1)),
    (192, tc(64, 32, 4, 2, 1).with(Resident)),
    (224, tc(64, 64, 4, 1, 1)),
    (256, tc(64, 64, 4, 1, 1).with(Exchange)),
];

/// The dense forward's rows under a softcap ([`crate::spec::Scores::Softcap`]): the plain
/// rows, except where the multiply and `tanh` per score leave ptxas too few registers
/// (it spills the plain rows 4 to 44 bytes there): d64 with Q streamed from shared memory
/// instead of resident, d96 on 32-key blocks, d256 without the exchange (its compact row).
#[rustfmt::skip]
pub(crate) const FWD_SOFTCAP_TILES: [(u32, Sm80Tiles); 3] = [
    (64, tc(128, 64, 4, 2, 1)),
    (96, tc(128, 32, 4, 2, 1)),
    (256, tc(64, 64, 4, 1, 1)),
];

/// The forward's rows for GPUs whose shared memory per block is below the standard
/// row's ([`crate::spec::Tiling::Compact`]; RTX 30/40 allow 99 KiB): the same block_m and
/// warps (so the same grid), 96 KiB.
#[rustfmt::skip]
pub(crate) const FWD_COMPACT_TILES: [(u32, Sm80Tiles); 1] = [
    (256, tc(64, 64, 4, 1, 1)),
];

/// The backward main pass (one CTA per key block): block_n keys per CTA (16 per warp;
/// exchange: 32-key row blocks times column groups), block_m queries per inner step;
/// for dQ the warps split into query tiles times column groups of whole 64-column panels
/// (`kernels::sm80::bwd_atomic_dq::dq_split`). Q, dO, LSE and D are double buffered; K,
/// V and two dS^T tiles stay for the CTA. d160-d224 take two sweeps (dV, then dK and dQ),
/// as both accumulators do not fit at once. d128 and d256 run FA2's warp layouts
/// (exchange: each warp 32 keys x half (d128, 4 warps) or a quarter (d256, 8 warps) of
/// the head dim for dV and dK, P^T and dS^T through shared memory): every B fragment
/// feeds two mma; d128 on 64x64 with 4 warps leaves room for two CTAs per SM (255
/// registers, 115 KB). d64 runs 128 keys on 4 warps, 32 keys (two m-tiles) per warp with
/// K and V read from shared memory: every Q and dO fragment feeds two mma and the dQ
/// atomics per FLOP halve. From 8192 query rows on, d128 runs its long row
/// ([`BWD_LONG_TILES`]) in atomic mode. (64x128 on 8 warps, the d128 row before the
/// exchange layout, stays buildable for tuning: `--tile bwd:128=64,128,8,2,1`,
/// tests/ptxas_variants.rs.)
#[rustfmt::skip]
pub(crate) const BWD_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(64, 64, 4, 2, 1).with(Resident)),
    (64, tc(64, 128, 4, 2, 1)),
    (96, tc(64, 64, 4, 2, 1).with(Resident)),
    (128, tc(64, 64, 4, 2, 1).with(Exchange)),
    (160, tc(64, 64, 4, 2, 2)),
    (192, tc(64, 64, 4, 2, 2)),
    (224, tc(64, 64, 4, 2, 2)),
    (256, tc(64, 64, 8, 2, 1).with(Exchange)),
];

/// The varlen backward main pass ([`crate::spec::Pass::BwdVarlen`]): the dense rows,
/// except where they leave no register for the sequence on sm_80-sm_89 (its lengths come
/// from device memory, not the constant bank: ptxas for sm_80 spills the dense rows 4 to
/// 24 bytes there, for sm_90 not): d64 on 64 keys with resident Q fragments, d96 and d128
/// streamed on 64 keys (d128 without the exchange). At these head dims the dense rows are
/// the wide tiling ([`crate::spec::Tiling::Wide`]), for compute capability 9.0 on. No long
/// row.
#[rustfmt::skip]
pub(crate) const BWD_VARLEN_TILES: [(u32, Sm80Tiles); 3] = [
    (64, tc(64, 64, 4, 2, 1).with(Resident)),
    (96, tc(64, 64, 4, 2, 1)),
    (128, tc(64, 64, 4, 2, 1)),
];

/// The backward main pass under a softcap ([`crate::spec::Scores::Softcap`]; before the
/// window's rows): the rows below, except where the `tanh` and its derivative cost sm_80
/// spills (ptxas -v): d32 (4 bytes at its 128-register cap) and d96 (16 bytes) without
/// resident fragments; varlen d128 (4-12 bytes, also on 32-query blocks) in two sweeps
/// (220 registers; sm_90 runs its wide row).
#[rustfmt::skip]
pub(crate) const BWD_SOFTCAP_TILES: [(u32, Sm80Tiles); 2] = [
    (32, tc(64, 64, 4, 2, 1)),
    (96, tc(64, 64, 4, 2, 1)),
];
/// [`BWD_SOFTCAP_TILES`] for the varlen pass.
#[rustfmt::skip]
pub(crate) const BWD_VARLEN_SOFTCAP_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(64, 64, 4, 2, 2)),
];

/// The varlen backward main pass under ALiBi: d128 on the softcap's two sweeps of 64 x 64
/// (the one-sweep row spills 8 bytes on sm_80 with the sequence's lengths and the bias).
#[rustfmt::skip]
pub(crate) const BWD_VARLEN_ALIBI_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(64, 64, 4, 2, 2)),
];

/// The backward main pass under a sliding window ([`crate::spec::Mask::Local`]; dense
/// and varlen): the rows above, except where the window's bounds and the second edge of
/// the query mask cost sm_80 spills (ptxas -v, 255 registers): d96 (16 bytes dense)
/// without resident fragments, d128 varlen (8 bytes) on 32-query blocks (0 spills in 254
/// registers; two sweeps of 64 would take 200 but compute S^T and P^T twice).
#[rustfmt::skip]
pub(crate) const BWD_LOCAL_TILES: [(u32, Sm80Tiles); 1] = [
    (96, tc(64, 64, 4, 2, 1)),
];
/// [`BWD_LOCAL_TILES`] for the varlen pass.
#[rustfmt::skip]
pub(crate) const BWD_VARLEN_LOCAL_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(32, 64, 4, 2, 1)),
];

/// The varlen forward ([`crate::spec::Pass::FwdVarlen`]): the dense rows, except d256,
/// whose exchange row spills 12 bytes on sm_80 (causal) with the sequence's lengths in
/// registers: it runs the compact row (64x64 on 4 warps without the exchange).
#[rustfmt::skip]
pub(crate) const FWD_VARLEN_TILES: [(u32, Sm80Tiles); 1] = [
    (256, tc(64, 64, 4, 1, 1)),
];

/// The varlen forward with both a window and a softcap: the rows above, except d128,
/// whose 128-query row spills 4 bytes on sm_80 with the sequence's lengths, the window's
/// bounds and the cap in registers: one m-tile per warp (64 x 64).
#[rustfmt::skip]
pub(crate) const FWD_VARLEN_LOCAL_SOFTCAP_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(64, 64, 4, 2, 1)),
];

/// The backward main pass's rows for long sequences ([`crate::spec::Tiling::Long`]):
/// (head dim, the fewest query rows it is chosen for, tiles). d128: FA2's 128 keys on 8
/// warps with the late prefetch: half the dQ atomics per FLOP of the 64-key row, but one
/// CTA per SM instead of two, which only pays once the sequence is long enough to keep
/// the atomics the bottleneck (from 8192 query rows). Atomic mode only: the
/// deterministic mode's main pass has no atomics to halve.
#[rustfmt::skip]
pub(crate) const BWD_LONG_TILES: [(u32, u32, Sm80Tiles); 1] = [
    (128, 8192, tc(64, 128, 8, 2, 1).with(ExchangeLatePrefetch)),
];

/// The backward main pass's rows for GPUs whose shared memory per block is below the
/// standard (or long, or wide) row's ([`crate::spec::Tiling::Compact`]; RTX 30/40, L4,
/// L40: 99 KiB), dense and varlen, every mask and score modifier: the head dims whose
/// rows take more (d96-d256: 113-209 KiB; d32 and d64 fit). The stream keeps its two
/// stages (the loop's prefetch); the query block and, from d160, the key block shrink
/// until K, V, two stages of Q and dO and the two dS^T panels fit: d96 and d128 on 32
/// queries (80.5 KiB, the windowed varlen d128's row), d160 and d192 on 32 x 32 with two
/// warps in two sweeps (80.5 KiB), d224 and d256 on 16 queries x 32 keys in two sweeps
/// (72.3 KiB). Smaller blocks mean more CTAs and more dQ atomics per FLOP: slower than the
/// standard rows, but a backward where there was none (0 spills, ptxas -v). d64's row (64
/// keys, resident Q fragments: the standard row before 128 keys) fits 99 KiB like the
/// standard one; it is there for shared memory per SM
/// ([`crate::KernelSpec::for_smem_per_sm`]): an A100's 164 KiB holds one CTA of the
/// standard row (97 KiB) but two of this one, as it does two of d96's and d128's compact rows.
#[rustfmt::skip]
pub(crate) const BWD_COMPACT_TILES: [(u32, Sm80Tiles); 7] = [
    (64, tc(64, 64, 4, 2, 1).with(Resident)),
    (96, tc(32, 64, 4, 2, 1)),
    (128, tc(32, 64, 4, 2, 1)),
    (160, tc(32, 32, 2, 2, 2)),
    (192, tc(32, 32, 2, 2, 2)),
    (224, tc(16, 32, 2, 2, 2)),
    (256, tc(16, 32, 2, 2, 2)),
];

/// [`BWD_COMPACT_TILES`] for the varlen pass under a softcap: d128 in two sweeps (the
/// one-sweep row spills 4-8 bytes on sm_80 with the sequence's lengths and the cap).
#[rustfmt::skip]
pub(crate) const BWD_VARLEN_SOFTCAP_COMPACT_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(32, 64, 4, 2, 2)),
];

/// The deterministic dQ pass's rows within 99 KiB ([`crate::spec::Tiling::Compact`]):
/// d224 and d256, whose standard row (Q and dO of 64 rows resident, two stages of 32-key
/// K and V) takes 128 KiB; 16-key blocks keep the 64-row query block (96 KiB).
#[rustfmt::skip]
pub(crate) const BWD_DQ_COMPACT_TILES: [(u32, Sm80Tiles); 2] = [
    (224, tc(64, 16, 4, 2, 1)),
    (256, tc(64, 16, 4, 2, 1)),
];

/// The deterministic dQ pass (one CTA per query block, like the forward): one m16 tile
/// per warp with Q and dO fragments resident, or (d128) two m-tiles sharing every K and
/// V fragment, which beats 64x64 resident there.
#[rustfmt::skip]
pub(crate) const BWD_DQ_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(64, 64, 4, 2, 1).with(Resident)),
    (64, tc(64, 64, 4, 2, 1).with(Resident)),
    (96, tc(64, 64, 4, 2, 1).with(Resident)),
    (128, tc(128, 32, 4, 2, 1)),
    (160, tc(64, 32, 4, 2, 1).with(Resident)),
    (192, tc(64, 32, 4, 2, 1)),
    (224, tc(64, 32, 4, 2, 1)),
    (256, tc(64, 32, 4, 2, 1)),
];

/// The dQ pass under a softcap (dense and varlen; before the window's rows): d128 on the
/// window's 64 x 64 row (the 128-query one spills 4-36 bytes).
#[rustfmt::skip]
pub(crate) const BWD_DQ_SOFTCAP_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(64, 64, 4, 2, 1)),
];
/// [`BWD_DQ_SOFTCAP_TILES`] for the varlen pass (d160 there: its resident row spills;
/// the dense one keeps it, whose non-resident twin ptxas caps at 168 registers for sm_90
/// and spills 8 bytes).
#[rustfmt::skip]
pub(crate) const BWD_DQ_VARLEN_SOFTCAP_TILES: [(u32, Sm80Tiles); 2] = [
    (128, tc(64, 64, 4, 2, 1)),
    (160, tc(64, 32, 4, 2, 1)),
];

/// The varlen dQ pass under ALiBi: d128 on 64 x 64 (the 128-query row spills 4 bytes on
/// sm_80).
#[rustfmt::skip]
pub(crate) const BWD_DQ_VARLEN_ALIBI_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(64, 64, 4, 2, 1)),
];

/// The dQ pass under a sliding window (dense and varlen): the rows above, except d128,
/// whose 128-query row spills 24 bytes on sm_80 with the window's bounds and the first
/// visible key of each row in registers: one m-tile per warp (64 x 64).
#[rustfmt::skip]
pub(crate) const BWD_DQ_LOCAL_TILES: [(u32, Sm80Tiles); 1] = [
    (128, tc(64, 64, 4, 2, 1)),
];

/// The split-KV forward (decode against a KV cache) for up to 16 packed rows (a decode
/// step's query heads of one KV group, or a few tokens of speculative verification): the
/// key-split layout (`kernels::sm80::key_split`), every warp on the one m16 tile of rows
/// and its own 16-key slices of each block, so the chain of dependent products a block
/// costs is `warps` times shorter than one warp working alone (with 64-row tiles, a decode
/// step's rows keep one warp busy and three idle). Four stages, three blocks in flight
/// (the stream is deep: a split reads its key range alone, and with one block in flight
/// its time per block is a memory round trip): 1.1-1.3x the two-stage rows at batch 1
/// (docs/performance.md). d32 and d160 up take 2 warps (the Q copy covers 16 rows of d32
/// with 64 threads; 32-key blocks for the wide rows). 102-136 KiB, one CTA per SM; GPUs
/// with less shared memory per block run [`FWD_SPLIT_COMPACT_TILES`].
#[rustfmt::skip]
pub(crate) const FWD_SPLIT_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(16, 128, 2, 4, 1).with(KeySplit)),
    (64, tc(16, 128, 4, 4, 1).with(KeySplit)),
    (96, tc(16, 64, 4, 4, 1).with(KeySplit)),
    (128, tc(16, 64, 4, 4, 1).with(KeySplit)),
    (160, tc(16, 32, 2, 4, 1).with(KeySplit)),
    (192, tc(16, 32, 2, 4, 1).with(KeySplit)),
    (224, tc(16, 32, 2, 4, 1).with(KeySplit)),
    (256, tc(16, 32, 2, 4, 1).with(KeySplit)),
];

/// The key-split rows for GPUs with less shared memory per block (RTX 30/40: 99 KiB):
/// two stages, 54-72 KiB.
#[rustfmt::skip]
pub(crate) const FWD_SPLIT_COMPACT_TILES: [(u32, Sm80Tiles); 8] = [
    (32, tc(16, 128, 2, 2, 1).with(KeySplit)),
    (64, tc(16, 128, 4, 2, 1).with(KeySplit)),
    (96, tc(16, 64, 4, 2, 1).with(KeySplit)),
    (128, tc(16, 64, 4, 2, 1).with(KeySplit)),
    (160, tc(16, 32, 2, 2, 1).with(KeySplit)),
    (192, tc(16, 32, 2, 2, 1).with(KeySplit)),
    (224, tc(16, 32, 2, 2, 1).with(KeySplit)),
    (256, tc(16, 32, 2, 2, 1).with(KeySplit)),
];

/// The split-KV forward from 17 packed rows on (more queries: speculative verification
/// of many tokens, chunked prefill): (head dim, the fewest packed rows, tiles). One m16
/// tile per warp, 64 rows a CTA, so each K/V block read serves 64 rows; at most 96 KiB.
#[rustfmt::skip]
pub(crate) const FWD_SPLIT_LONG_TILES: [(u32, u32, Sm80Tiles); 8] = [
    (32, 17, tc(64, 128, 4, 2, 1)),
    (64, 17, tc(64, 128, 4, 2, 1)),
    (96, 17, tc(64, 64, 4, 2, 1)),
    (128, 17, tc(64, 64, 4, 2, 1)),
    (160, 17, tc(64, 32, 4, 2, 1)),
    (192, 17, tc(64, 32, 4, 2, 1)),
    (224, 17, tc(64, 32, 4, 2, 1)),
    (256, 17, tc(64, 32, 4, 2, 1)),
];

/// The split-KV forward's rows for many packed rows ([`crate::spec::Tiling::Prefill`]):
/// the dense forward's d128 tile from 128 packed rows (a chunked prefill). On the H200,
/// 512 rows x 8 heads against 8K / 16K / 32K keys: 65.5 / 111.6 / 202.8 us at 8 splits
/// against 68.2 / 123.3 / 227.0 on the long row's 64x64 tiles at 4 (its best), same
/// combine.
pub(crate) const FWD_SPLIT_PREFILL_TILES: [(u32, u32, Sm80Tiles); 1] =
    [(128, 128, tc(128, 32, 4, 2, 1))];

/// The combine step: one row per CTA, its 4 warps sharing the splits (a decode step has
/// few rows and many splits: 32 splits' partial rows in flight per row).
#[rustfmt::skip]
pub(crate) const FWD_COMBINE_TILES: [(u32, Sm80Tiles); 8] = [
    (32, COMBINE),
    (64, COMBINE),
    (96, COMBINE),
    (128, COMBINE),
    (160, COMBINE),
    (192, COMBINE),
    (224, COMBINE),
    (256, COMBINE),
];
const COMBINE: Sm80Tiles = tc(1, 0, 4, 1, 1);

/// The combine step from 33 splits on ([`crate::spec::Tiling::Long`]; the middle column
/// counts splits): 8 warps a row, so that 64 splits are in one round of loads (on the
/// H200, batch 1, one KV head, 32K keys, 64 splits: 14.6 us against 15.7 with 4 warps;
/// at 32 splits and below, and over the 4096 rows of a chunked prefill, 4 warps ran
/// faster).
#[rustfmt::skip]
pub(crate) const FWD_COMBINE_LONG_TILES: [(u32, u32, Sm80Tiles); 8] = [
    (32, 33, COMBINE_WIDE),
    (64, 33, COMBINE_WIDE),
    (96, 33, COMBINE_WIDE),
    (128, 33, COMBINE_WIDE),
    (160, 33, COMBINE_WIDE),
    (192, 33, COMBINE_WIDE),
    (224, 33, COMBINE_WIDE),
    (256, 33, COMBINE_WIDE),
];
const COMBINE_WIDE: Sm80Tiles = tc(1, 0, 8, 1, 1);

/// The combine step up to 8 splits ([`crate::spec::Tiling::Prefill`]; the middle column
/// is the most splits): a row per warp, 4 rows a CTA, each warp's one run of loads
/// covering every split (the many rows of a chunked prefill, a batched decode's few
/// splits). On the H200, 512 rows x 8 heads against 8K keys, 8 splits: 61.9 us against
/// 66.6 with 4 warps a row; b8, 16 x 32 heads, 4K, 4 splits: 49.6 against 54.9; at 32
/// splits (4 runs a warp) slower: 11.9 against 10.0.
#[rustfmt::skip]
pub(crate) const FWD_COMBINE_PREFILL_TILES: [(u32, u32, Sm80Tiles); 8] = [
    (32, 8, COMBINE_ROWS),
    (64, 8, COMBINE_ROWS),
    (96, 8, COMBINE_ROWS),
    (128, 8, COMBINE_ROWS),
    (160, 8, COMBINE_ROWS),
    (192, 8, COMBINE_ROWS),
    (224, 8, COMBINE_ROWS),
    (256, 8, COMBINE_ROWS),
];
const COMBINE_ROWS: Sm80Tiles = tc(4, 0, 4, 1, 1);

/// Elementwise passes (preprocess, postprocess): block_m rows per CTA, one warp per row.
#[rustfmt::skip]
pub(crate) const ELEMENTWISE_TILES: [(u32, Sm80Tiles); 8] = [
    (32, ELEMENTWISE),
    (64, ELEMENTWISE),
    (96, ELEMENTWISE),
    (128, ELEMENTWISE),
    (160, ELEMENTWISE),
    (192, ELEMENTWISE),
    (224, ELEMENTWISE),
    (256, ELEMENTWISE),
];
const ELEMENTWISE: Sm80Tiles = tc(64, 0, 4, 1, 1);
