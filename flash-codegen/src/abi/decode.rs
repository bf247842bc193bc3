//! ABI layer: the split-KV forward ([`Pass::FwdSplit`]) and
//! its combine step ([`Pass::FwdCombine`]).
//!
//! A launch sequence: the split pass on grid [`split_grid`], then, when `num_splits > 1`,
//! the combine pass on grid [`combine_grid`] over the same partial buffers. With one split
//! the split pass writes o and lse itself and the combine pass is not launched.
//!
//! **Packed rows.** The split pass packs the `heads_per_kv` query heads of one KV head into
//! the rows of one tile, so each K/V byte is read once per group: packed row `r` of KV
//! head `kh` is query position `r / heads_per_kv` of query head
//! `kh * heads_per_kv + r % heads_per_kv`. The partial buffers keep that order: within a
//! batch, row `kh * heads_per_kv * seqlen_q + r`; [`packed_row`] gives it.
//!
//! **Partial buffers** (f32, contiguous, never read by the caller):
//! `o_accum [num_splits, batch, heads * seqlen_q, head_dim_kernel]` and
//! `lse_accum [num_splits, batch, heads * seqlen_q]` (natural log; -inf for a split that
//! saw no key of the row). Every element of both is written by the split pass before the
//! combine pass reads it.
//!
//! **seqlens_k** (i32 `[batch]`, on the device, optional): the valid keys of each sequence
//! in a cache of capacity `seqlen_k`. The kernels clamp each value to `[0, seqlen_k]`, so
//! no value makes them read or write out of bounds; the causal mask is bottom-right per
//! sequence (the queries are the last `seqlen_q` positions of the sequence).

use super::args::{
    BLOCK_TABLE, HEAD_DIM, HEADS, HEADS_PER_KV, K, LSE, LSE_ACCUM, MAX_PAGES, NUM_PAGES,
    NUM_SPLITS, O, O_ACCUM, PAGE_SHIFT, Q, SCALE_LOG2, SEQLEN_K, SEQLEN_Q, SEQLENS_K, V,
};
use super::{ParamDesc, cat};
use crate::spec::{KernelSpec, Pass};

/// The most splits a KV-cache forward may take: the combine step merges at most this many
/// (`num_splits` is 1 to `MAX_SPLITS`).
pub const MAX_SPLITS: u32 = 128;

const O_ACCUM_DESC: ParamDesc = O_ACCUM.desc(
    "partial outputs, f32 [num_splits, batch, heads * seqlen_q, head_dim_kernel], rows in packed order (abi::decode); written by fwdsplit, read by fwdcombine; may be 0 when num_splits == 1",
);
const LSE_ACCUM_DESC: ParamDesc = LSE_ACCUM.desc(
    "partial LSEs, f32 [num_splits, batch, heads * seqlen_q], packed order (natural log); may be 0 when num_splits == 1",
);

const SPLIT_HEAD: [ParamDesc; 15] = [
    Q.ptr
        .desc("device pointer to q [batch, seqlen_q, heads, head_dim], 16-byte aligned"),
    K.ptr.desc(
        "device pointer to the k cache [batch, seqlen_k (capacity), heads_k, head_dim], 16-byte aligned",
    ),
    V.ptr.desc("device pointer to the v cache, like k, 16-byte aligned"),
    O.ptr.desc(
        "device pointer to o [batch, seqlen_q, heads, head_dim], written when num_splits == 1",
    ),
    LSE.desc(
        "lse f32 [batch, heads, seqlen_q] (natural log), written when num_splits == 1, or 0 to skip",
    ),
    O_ACCUM_DESC,
    LSE_ACCUM_DESC,
    SEQLENS_K.desc(
        "valid keys per sequence, i32 [batch] (each clamped to [0, seqlen_k]), or 0: every sequence has seqlen_k",
    ),
    SEQLEN_Q.desc("query rows per sequence (the last seqlen_q positions of each sequence)"),
    SEQLEN_K.desc("the cache's capacity: rows of k and v per batch"),
    HEAD_DIM.desc("the problem's head dim: a multiple of 8, at most the kernel's"),
    HEADS.desc("number of query heads"),
    HEADS_PER_KV.desc("heads / heads_k (1 = MHA, heads = MQA)"),
    SCALE_LOG2.desc("softmax scale times log2(e)"),
    NUM_SPLITS.desc("key-range splits per (batch, KV head), 1 to 128 (abi::decode::MAX_SPLITS)"),
];

/// Split-KV forward parameters, in launch order. Strides are in elements; the last dim of
/// every tensor is contiguous. Grid: [`split_grid`].
pub const FWD_SPLIT_PARAMS: [ParamDesc; 27] = cat(
    SPLIT_HEAD,
    cat::<6, 6, 12>(
        cat::<3, 3, 6>(Q.strides(), K.strides()),
        cat::<3, 3, 6>(V.strides(), O.strides()),
    ),
);

/// Paged split-KV forward parameters ([`Pass::FwdPaged`]), in launch order: those of
/// [`FWD_SPLIT_PARAMS`], k and v pointing at page pools `[num_pages, page_size, heads_k,
/// head_dim]` (their batch strides are the page strides; `seqlen_k` is the capacity,
/// `max_pages * page_size`), then the page table. Key `n` of sequence `b` sits in row
/// `n % page_size` of page `block_table[b, n / page_size]`; the kernel clamps every page
/// index it reads to `[0, num_pages)`, so no table content makes it read outside the pools.
/// The pools' page and row strides must each be below 2^31 elements (the kernel scales
/// them in 32 bits).
pub const FWD_PAGED_PARAMS: [ParamDesc; 31] = cat(
    FWD_SPLIT_PARAMS,
    [
        BLOCK_TABLE.desc(
            "device pointer to the page table, i32 [batch, max_pages] (entries clamped to [0, num_pages))",
        ),
        MAX_PAGES.desc("entries per row of block_table; seqlen_k = max_pages * page_size"),
        PAGE_SHIFT.desc("log2 of page_size (rows per page), 0 to 30"),
        NUM_PAGES.desc("pages in each of the k and v pools, at least 1 (any value when max_pages = 0)"),
    ],
);

/// Combine parameters, in launch order. Grid: [`combine_grid`].
pub const FWD_COMBINE_PARAMS: [ParamDesc; 12] = cat(
    [
        O_ACCUM_DESC,
        LSE_ACCUM_DESC,
        O.ptr
            .desc("device pointer to o [batch, seqlen_q, heads, head_dim] (written)"),
        LSE.desc("lse f32 [batch, heads, seqlen_q] (written, natural log), or 0 to skip"),
        SEQLEN_Q.desc("query rows per sequence"),
        HEAD_DIM.desc("the problem's head dim: a multiple of 8, at most the kernel's"),
        HEADS.desc("number of query heads"),
        HEADS_PER_KV.desc("heads / heads_k"),
        NUM_SPLITS.desc("key-range splits, as given to fwdsplit: 2 to 128"),
    ],
    O.strides(),
);

/// The split pass's grid: (packed query blocks, KV heads, batch * splits).
pub fn split_grid(
    spec: &KernelSpec,
    [batch, seqlen_q, heads, heads_k]: [u32; 4],
    num_splits: u32,
) -> [u32; 3] {
    assert!(matches!(spec.pass, Pass::FwdSplit | Pass::FwdPaged));
    let rows = seqlen_q * (heads / heads_k.max(1));
    [
        rows.div_ceil(spec.tiles().block_m()),
        heads_k,
        batch * num_splits,
    ]
}

/// The combine pass's grid: (packed rows of a batch / block_m, batch, 1).
pub fn combine_grid(spec: &KernelSpec, [batch, seqlen_q, heads]: [u32; 3]) -> [u32; 3] {
    assert_eq!(spec.pass, Pass::FwdCombine);
    [
        (heads * seqlen_q).div_ceil(spec.tiles().block_m()),
        batch,
        1,
    ]
}

/// Where (query position, query head) sits in a batch's packed rows.
pub fn packed_row(pos: u32, head: u32, seqlen_q: u32, heads_per_kv: u32) -> u32 {
    let (kh, g) = (head / heads_per_kv, head % heads_per_kv);
    kh * heads_per_kv * seqlen_q + pos * heads_per_kv + g
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed order is a bijection of a batch's (position, head) pairs.
    #[test]
    fn packed_rows_are_a_permutation() {
        for (sq, h, hpk) in [(1, 32, 4), (3, 8, 8), (5, 6, 1), (7, 4, 2)] {
            let mut seen = vec![false; (sq * h) as usize];
            for pos in 0..sq {
                for head in 0..h {
                    let r = packed_row(pos, head, sq, hpk) as usize;
                    assert!(!seen[r], "{sq} {h} {hpk}: row {r} twice");
                    seen[r] = true;
                }
            }
        }
    }
}
