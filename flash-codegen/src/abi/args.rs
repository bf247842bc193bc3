//! ABI layer: one handle per kernel parameter, the only place its name is written. The
//! pass tables ([`super::FWD_PARAMS`], ...) are built from these, and kernels read a
//! parameter through its handle (`Params::get(SEQLEN_Q)`, `Params::tensor(b, &Q, ..)`).

use super::types::{Arg, TensorArgs};
use crate::ptx::{B32, B64, F32};

/// The handle of tensor `$t`: its pointer and its three strides.
macro_rules! tensor {
    ($t:literal) => {
        TensorArgs::new(
            $t,
            [
                concat!($t, "_batch_stride"),
                concat!($t, "_row_stride"),
                concat!($t, "_head_stride"),
            ],
            [
                concat!("elements between batches of ", $t),
                concat!("elements between sequence positions of ", $t),
                concat!("elements between heads of ", $t),
            ],
        )
    };
}

/// Queries `q [batch, seqlen_q, heads, head_dim]`.
pub const Q: TensorArgs = tensor!("q");
/// Keys `k [batch, seqlen_k, heads_k, head_dim]`.
pub const K: TensorArgs = tensor!("k");
/// Values `v [batch, seqlen_k, heads_k, head_dim]`.
pub const V: TensorArgs = tensor!("v");
/// The forward output `o [batch, seqlen_q, heads, head_dim]`.
pub const O: TensorArgs = tensor!("o");
/// The output gradient `do`, like `o`.
pub const DO: TensorArgs = tensor!("do");
/// The key gradient `dk`, like `k`.
pub const DK: TensorArgs = tensor!("dk");
/// The value gradient `dv`, like `v`.
pub const DV: TensorArgs = tensor!("dv");
/// The query gradient `dq`, like `q`.
pub const DQ: TensorArgs = tensor!("dq");

/// The log-sum-exp `lse`, f32 `[batch, heads, seqlen_q]`.
pub const LSE: Arg<B64> = Arg::ptr("lse");
/// D = rowsum(dO * O), f32 `[batch, heads, seqlen_q]`.
pub const DVEC: Arg<B64> = Arg::ptr("dvec");
/// The f32 dQ accumulator (opaque scratch), or 0.
pub const DQ_ACCUM: Arg<B64> = Arg::ptr("dq_accum");
/// The split-KV forward's partial outputs, f32 (see [`super::decode`]).
pub const O_ACCUM: Arg<B64> = Arg::ptr("o_accum");
/// The split-KV forward's partial LSEs, f32 (see [`super::decode`]).
pub const LSE_ACCUM: Arg<B64> = Arg::ptr("lse_accum");
/// The grouped-query backward's f32 partial dK and dV per split (see
/// [`GROUP_SPLIT_SHIFT`]), or 0.
pub const DKV_PARTIAL: Arg<B64> = Arg::ptr("dkv_partial");
/// log2 of the CTAs sharing the query heads of each (key block, kv head) in the backward
/// main pass (a power of two: the kernels divide by shifting).
pub const GROUP_SPLIT_SHIFT: Arg<B32> = Arg::u32("group_split_shift");
/// Valid keys per sequence, i32 `[batch]`, or 0.
pub const SEQLENS_K: Arg<B64> = Arg::ptr("seqlens_k");
/// Key-range splits per (batch, KV head).
pub const NUM_SPLITS: Arg<B32> = Arg::u32("num_splits");
/// The paged KV cache's page table (i32 `[batch, max_pages]`).
pub const BLOCK_TABLE: Arg<B64> = Arg::ptr("block_table");
/// Entries per row of the page table.
pub const MAX_PAGES: Arg<B32> = Arg::u32("max_pages");
/// log2 of the rows per page.
pub const PAGE_SHIFT: Arg<B32> = Arg::u32("page_shift");
/// Pages in each of the K and V pools.
pub const NUM_PAGES: Arg<B32> = Arg::u32("num_pages");
/// Packed (varlen) sequences' query offsets, i32 `[batch + 1]`.
pub const CU_SEQLENS_Q: Arg<B64> = Arg::ptr("cu_seqlens_q");
/// Packed (varlen) sequences' key offsets, i32 `[batch + 1]`.
pub const CU_SEQLENS_K: Arg<B64> = Arg::ptr("cu_seqlens_k");
/// Rows of the packed q (and o, dO, dq) buffers.
pub const TOTAL_Q: Arg<B32> = Arg::u32("total_q");
/// Rows of the packed k and v (and dk, dv) buffers.
pub const TOTAL_K: Arg<B32> = Arg::u32("total_k");
/// Query sequence length.
pub const SEQLEN_Q: Arg<B32> = Arg::u32("seqlen_q");
/// Key/value sequence length.
pub const SEQLEN_K: Arg<B32> = Arg::u32("seqlen_k");
/// The problem's head dim (at most the kernel's).
pub const HEAD_DIM: Arg<B32> = Arg::u32("head_dim");
/// Number of query heads.
pub const HEADS: Arg<B32> = Arg::u32("heads");
/// heads / heads_k.
pub const HEADS_PER_KV: Arg<B32> = Arg::u32("heads_per_kv");
/// Softmax scale times log2(e).
pub const SCALE_LOG2: Arg<F32> = Arg::f32("scale_log2");
/// Softmax scale.
pub const SOFTMAX_SCALE: Arg<F32> = Arg::f32("softmax_scale");
/// A sliding window's keys before the diagonal (`Mask::Local` kernels).
pub const WINDOW_LEFT: Arg<B32> = Arg::u32("window_left");
/// A sliding window's keys after the diagonal (`Mask::Local` kernels).
pub const WINDOW_RIGHT: Arg<B32> = Arg::u32("window_right");

/// The logit softcap (`Scores::Softcap` kernels): scores become `cap * tanh(x / cap)`.
pub const SOFTCAP: Arg<F32> = Arg::f32("softcap");
/// ALiBi's slopes: f32 `[heads]` or `[batch, heads]` (`Scores::Alibi` kernels).
pub const ALIBI_SLOPES: Arg<B64> = Arg::ptr("alibi_slopes");
/// ALiBi's slopes per batch: 0 for `[heads]`, `heads` for `[batch, heads]`.
pub const ALIBI_BATCH_STRIDE: Arg<B32> = Arg::u32("alibi_batch_stride");

/// Every tensor handle.
pub const TENSORS: [TensorArgs; 8] = [Q, K, V, O, DO, DK, DV, DQ];
