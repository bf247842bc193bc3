//! Manifest layer: the sm_90a kernels' parameter table ([`PARAMS`]): every parameter a
//! variant may take, its type and what a caller passes.

use crate::abi::AbiTy;
#[cfg(doc)]
use crate::kernels::sm90::fwd;

/// The kernel's parameters in order, the tensor maps ([`fwd::MAPS_TST`]: a variant takes
/// those of [`fwd::Variant::maps`]) then the scalars ([`fwd::SCALARS`]; a variant takes
/// those of [`fwd::Variant::scalars`]), with the type the caller passes and what to pass.
pub const PARAMS: [(&str, AbiTy, &str); 21] = [
    (
        "tm_q",
        AbiTy::TensorMap,
        "the CUtensorMap of q (tensor_maps entry with param tm_q), 128 bytes by value",
    ),
    (
        "tm_k",
        AbiTy::TensorMap,
        "the CUtensorMap of k (tensor_maps entry with param tm_k), 128 bytes by value",
    ),
    (
        "tm_v",
        AbiTy::TensorMap,
        "the CUtensorMap of v (tensor_maps entry with param tm_v), 128 bytes by value",
    ),
    (
        "tm_o",
        AbiTy::TensorMap,
        "the CUtensorMap of o (tensor_maps entry with param tm_o; the TMA epilogue's kernels, _tst, write o through it), 128 bytes by value",
    ),
    (
        "o",
        AbiTy::Ptr,
        "device pointer to o [batch, seqlen_q, heads, head_dim] (written; head_dim contiguous), 4-byte aligned (a kernel with tm_o writes through the map: pass o's pointer and strides all the same)",
    ),
    (
        "lse",
        AbiTy::Ptr,
        "device pointer to lse f32 [batch, heads, seqlen_q], contiguous (written, natural log), or 0 to skip",
    ),
    (
        "seqlen_q",
        AbiTy::U32,
        "query sequence length (below 2^31 - 256)",
    ),
    (
        "seqlen_k",
        AbiTy::U32,
        "key/value sequence length (at least 1, below 2^31 - 256)",
    ),
    (
        "group",
        AbiTy::U32,
        "heads / heads_k (1 = MHA, heads = MQA)",
    ),
    ("heads", AbiTy::U32, "number of query heads"),
    (
        "o_row",
        AbiTy::U32,
        "o's row (sequence position) stride in elements, even",
    ),
    ("o_head", AbiTy::U32, "o's head stride in elements, even"),
    ("o_batch", AbiTy::U64, "o's batch stride in elements, even"),
    (
        "scale_log2",
        AbiTy::F32,
        "softmax scale times log2(e) (default 1/sqrt(head_dim) * 1.4426950408889634)",
    ),
    ("batch", AbiTy::U32, "batch size (q's first dimension)"),
    (
        "window_left",
        AbiTy::U32,
        "sliding-window kernels (_local) only: keys before the diagonal a query sees (query i sees keys i + seqlen_k - seqlen_q - window_left ..= i + seqlen_k - seqlen_q + window_right), 4294967295 (-1 as u32) for unbounded",
    ),
    (
        "window_right",
        AbiTy::U32,
        "sliding-window kernels (_local) only: keys after the diagonal a query sees, 4294967295 (-1 as u32) for unbounded",
    ),
    (
        "softcap",
        AbiTy::F32,
        "softcap kernels (_softcap) only: the cap (finite, > 0): scores s = cap * tanh(s / cap) before the softmax",
    ),
    (
        "alibi_slopes",
        AbiTy::Ptr,
        "ALiBi kernels (_alibi) only: device pointer to the f32 slopes, [heads] or [batch, heads], 4-byte aligned; the score of query i and key j gets -slope * |i + seqlen_k - seqlen_q - j|",
    ),
    (
        "alibi_batch_stride",
        AbiTy::U32,
        "ALiBi kernels (_alibi) only: slopes per batch entry, 0 for [heads] or heads for [batch, heads]",
    ),
    (
        "tile_counter",
        AbiTy::U64,
        "dynamic-scheduler kernels (_dyn) only: device pointer to a zeroed u32[2], 4-byte aligned, that no launch running at the same time uses (the kernel leaves it zeroed)",
    ),
];
