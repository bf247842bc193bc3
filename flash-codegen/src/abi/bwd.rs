//! ABI layer: the backward passes' parameters, in launch order. Strides are in elements;
//! the last dim of every tensor is contiguous. Scratch buffers (D, dq_accum) are
//! contiguous f32.

use super::args::{
    DK, DKV_PARTIAL, DO, DQ, DQ_ACCUM, DV, DVEC, GROUP_SPLIT_SHIFT, HEAD_DIM, HEADS, HEADS_PER_KV,
    K, LSE, O, Q, SCALE_LOG2, SEQLEN_K, SEQLEN_Q, SOFTMAX_SCALE, V,
};
use super::{ParamDesc, cat};

const DVEC_DESC: ParamDesc = DVEC.desc("D = rowsum(dO * O), f32 [batch, heads, seqlen_q]");
const DQ_ACCUM_DESC: ParamDesc = DQ_ACCUM.desc(
    "f32 dQ accumulator (unscaled), batch * heads * 16 ceil(seqlen_q / 16) * head_dim elements in MMA-fragment order (opaque scratch: zeroed by bwdpre, read by bwdpost), or 0 (deterministic mode: no dQ here)",
);

/// Preprocess: D = rowsum(dO * O) per query row; zeroes dq_accum when non-null.
/// Grid: [ceil(seqlen_q / block_m), heads, batch].
pub const BWD_PRE_PARAMS: [ParamDesc; 12] = cat(
    [
        O.ptr
            .desc("forward output o [batch, seqlen_q, heads, head_dim]"),
        DO.ptr.desc("gradient dO, like o"),
        DVEC_DESC,
        DQ_ACCUM_DESC,
        SEQLEN_Q.desc("query sequence length"),
        HEAD_DIM.desc("the problem's head dim"),
    ],
    cat::<3, 3, 6>(O.strides(), DO.strides()),
);

const BWD_HEAD: [ParamDesc; 15] = [
    Q.ptr.desc("q [batch, seqlen_q, heads, head_dim]"),
    K.ptr.desc("k [batch, seqlen_k, heads_k, head_dim]"),
    V.ptr.desc("v [batch, seqlen_k, heads_k, head_dim]"),
    DO.ptr
        .desc("gradient dO [batch, seqlen_q, heads, head_dim]"),
    LSE.desc("forward LSE, f32 [batch, heads, seqlen_q] (natural log; -inf = fully masked row)"),
    DVEC_DESC,
    DQ_ACCUM_DESC,
    DK.ptr.desc(
        "dK [batch, seqlen_k, heads_k, head_dim] (written; summed over the heads of a group)",
    ),
    DV.ptr.desc(
        "dV [batch, seqlen_k, heads_k, head_dim] (written; summed over the heads of a group)",
    ),
    SEQLEN_Q.desc("query sequence length"),
    SEQLEN_K.desc("key/value sequence length"),
    HEAD_DIM.desc("the problem's head dim: a multiple of 8, at most the kernel's"),
    HEADS_PER_KV.desc("heads / heads_k"),
    SCALE_LOG2.desc("softmax scale times log2(e)"),
    SOFTMAX_SCALE.desc("softmax scale (dK = scale * dS^T Q)"),
];

const GROUP_SPLIT_SHIFT_DESC: ParamDesc = GROUP_SPLIT_SHIFT.desc(
    "log2 of group_splits, the CTAs sharing the query heads of each (key block, kv head) (a power of two, at most heads_per_kv; the kernels read at most 16): split s takes heads s, s + group_splits, ... of the group; grid y = heads_k * group_splits, y = kv_head * group_splits + s. 0 (one split): dK and dV written directly; more: each split writes f32 partials to dkv_partial and bwdkvsum adds them",
);
const DKV_PARTIAL_DESC: ParamDesc = DKV_PARTIAL.desc(
    "f32 partial dK (scaled) and dV of each split, group_splits * 2 * batch * seqlen_k * heads_k * head_dim elements: [split, (dK, dV), batch, seqlen_k, heads_k, head_dim], contiguous (may be 0 when group_split_shift = 0)",
);

/// Main backward pass: one CTA per (key block, kv head, batch) and group split.
/// Grid: [ceil(seqlen_k / block_n), heads_k * group_splits, batch], group_splits = 1 <<
/// group_split_shift.
pub const BWD_PARAMS: [ParamDesc; 36] = cat(
    BWD_HEAD,
    cat::<18, 3, 21>(
        cat::<9, 9, 18>(
            cat::<3, 6, 9>(Q.strides(), cat::<3, 3, 6>(K.strides(), V.strides())),
            cat::<3, 6, 9>(DO.strides(), cat::<3, 3, 6>(DK.strides(), DV.strides())),
        ),
        [
            HEADS.desc("number of query heads (heads_k * heads_per_kv)"),
            GROUP_SPLIT_SHIFT_DESC,
            DKV_PARTIAL_DESC,
        ],
    ),
);

/// Grouped-query split's sum: dK and dV = the sum of the splits' f32 partials, in split
/// order (bitwise reproducible), converted to the element type.
/// Grid: [ceil(seqlen_k / block_m), heads_k, batch].
pub const BWD_KV_SUM_PARAMS: [ParamDesc; 12] = cat(
    [
        DKV_PARTIAL_DESC,
        DK.ptr
            .desc("dK [batch, seqlen_k, heads_k, head_dim] (written)"),
        DV.ptr
            .desc("dV [batch, seqlen_k, heads_k, head_dim] (written)"),
        SEQLEN_K.desc("key/value sequence length"),
        HEAD_DIM.desc("the problem's head dim"),
        GROUP_SPLIT_SHIFT_DESC,
    ],
    cat::<3, 3, 6>(DK.strides(), DV.strides()),
);

/// Deterministic dQ: one CTA per (query block, head, batch), no atomics.
/// Grid: [ceil(seqlen_q / block_m), heads, batch].
pub const BWD_DQ_PARAMS: [ParamDesc; 29] = cat(
    [
        Q.ptr.desc("q [batch, seqlen_q, heads, head_dim]"),
        K.ptr.desc("k [batch, seqlen_k, heads_k, head_dim]"),
        V.ptr.desc("v [batch, seqlen_k, heads_k, head_dim]"),
        DO.ptr
            .desc("gradient dO [batch, seqlen_q, heads, head_dim]"),
        LSE.desc("forward LSE, f32 [batch, heads, seqlen_q]"),
        DVEC_DESC,
        DQ.ptr
            .desc("dQ [batch, seqlen_q, heads, head_dim] (written)"),
        SEQLEN_Q.desc("query sequence length"),
        SEQLEN_K.desc("key/value sequence length"),
        HEAD_DIM.desc("the problem's head dim"),
        HEADS_PER_KV.desc("heads / heads_k"),
        SCALE_LOG2.desc("softmax scale times log2(e)"),
        SOFTMAX_SCALE.desc("softmax scale (dQ = scale * dS K)"),
        HEADS.desc("number of query heads"),
    ],
    cat::<9, 6, 15>(
        cat::<3, 6, 9>(Q.strides(), cat::<3, 3, 6>(K.strides(), V.strides())),
        cat::<3, 3, 6>(DO.strides(), DQ.strides()),
    ),
);

/// Postprocess: dq = dq_accum * softmax_scale in the element type.
/// Grid: [ceil(seqlen_q / block_m), heads, batch].
pub const BWD_POST_PARAMS: [ParamDesc; 8] = cat(
    [
        DQ_ACCUM_DESC,
        DQ.ptr
            .desc("dQ [batch, seqlen_q, heads, head_dim] (written)"),
        SEQLEN_Q.desc("query sequence length"),
        HEAD_DIM.desc("the problem's head dim"),
        SOFTMAX_SCALE.desc("softmax scale"),
    ],
    DQ.strides(),
);
