//! ABI layer: the forward pass's parameters, in launch order. Strides are in elements; the
//! last dim of every tensor is contiguous.

use super::args::{
    ALIBI_BATCH_STRIDE, ALIBI_SLOPES, HEAD_DIM, HEADS, HEADS_PER_KV, K, LSE, O, Q, SCALE_LOG2,
    SEQLEN_K, SEQLEN_Q, SOFTCAP, V, WINDOW_LEFT, WINDOW_RIGHT,
};
use super::{ParamDesc, cat};

/// Forward parameters, in launch order. Strides are in elements; the last dim of every
/// tensor is contiguous.
pub const FWD_PARAMS: [ParamDesc; 23] = cat(
    FWD_HEAD,
    cat::<6, 6, 12>(
        cat::<3, 3, 6>(Q.strides(), K.strides()),
        cat::<3, 3, 6>(V.strides(), O.strides()),
    ),
);

/// The forward's pointers and scalars (its strides follow).
const FWD_HEAD: [ParamDesc; 11] = [
    Q.ptr
        .desc("device pointer to q [batch, seqlen_q, heads, head_dim], 16-byte aligned"),
    K.ptr
        .desc("device pointer to k [batch, seqlen_k, heads_k, head_dim], 16-byte aligned"),
    V.ptr
        .desc("device pointer to v [batch, seqlen_k, heads_k, head_dim], 16-byte aligned"),
    O.ptr
        .desc("device pointer to o [batch, seqlen_q, heads, head_dim] (written), 16-byte aligned"),
    LSE.desc(
        "device pointer to lse f32 [batch, heads, seqlen_q] (written, natural log), or 0 to skip",
    ),
    SEQLEN_Q.desc("query sequence length"),
    SEQLEN_K.desc("key/value sequence length"),
    HEAD_DIM.desc("the problem's head dim: a multiple of 8, at most the kernel's"),
    HEADS.desc("number of query heads"),
    HEADS_PER_KV.desc("heads / heads_k (1 = MHA, heads = MQA)"),
    SCALE_LOG2.desc("softmax scale times log2(e) (default 1/sqrt(head_dim) * 1.4426950408889634)"),
];

/// A sliding window's bounds, after a local kernel's pass parameters.
pub const WINDOW_PARAMS: [ParamDesc; 2] = [
    WINDOW_LEFT.desc(
        "keys before the diagonal each query sees: query i sees key j from i + seqlen_k - seqlen_q - window_left on (seqlen_k or more, e.g. 0xffffffff: unbounded)",
    ),
    WINDOW_RIGHT.desc(
        "keys after the diagonal each query sees: query i sees key j up to i + seqlen_k - seqlen_q + window_right (seqlen_q or more, e.g. 0xffffffff: unbounded; 0: causal)",
    ),
];

/// ALiBi's slopes, after an ALiBi kernel's pass parameters.
pub const ALIBI_PARAMS: [ParamDesc; 2] = [
    ALIBI_SLOPES.desc(
        "device pointer to ALiBi's slopes, f32 [heads] or [batch, heads]: the scaled score of query i and key j gets -slope * |i + seqlen_k - seqlen_q - j| added before the mask",
    ),
    ALIBI_BATCH_STRIDE.desc("slopes per batch: 0 for [heads] slopes, heads for [batch, heads]"),
];

/// The softcap's value, after a softcap kernel's pass (and window) parameters.
pub const SOFTCAP_PARAMS: [ParamDesc; 1] = [SOFTCAP.desc(
    "the logit softcap: each scaled score x = softmax_scale * q . k becomes softcap * tanh(x / softcap) before the mask and the softmax (finite, > 0; Gemma 2: 50 in attention)",
)];
