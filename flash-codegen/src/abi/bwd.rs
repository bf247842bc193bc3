//! ABI layer: the backward passes' parameters, in launch order. Strides are in elements;
//! the last dim of every tensor is contiguous. Scratch buffers (D, dq_accum) are
//! contiguous f32.

use super::{ParamDesc, cat, p};

const DVEC: ParamDesc = p(
    "dvec",
    "u64",
    "D = rowsum(dO * O), f32 [batch, heads, seqlen_q]",
);
const DQ_ACCUM: ParamDesc = p(
    "dq_accum",
    "u64",
    "f32 dQ accumulator (unscaled), batch * heads * 16 ceil(seqlen_q / 16) * head_dim elements in MMA-fragment order (opaque scratch: zeroed by bwdpre, read by bwdpost), or 0 (deterministic mode: no dQ here)",
);

/// Preprocess: D = rowsum(dO * O) per query row; zeroes dq_accum when non-null.
/// Grid: [ceil(seqlen_q / block_m), heads, batch].
pub const BWD_PRE_PARAMS: [ParamDesc; 12] = cat(
    [
        p(
            "o",
            "u64",
            "forward output o [batch, seqlen_q, heads, head_dim]",
        ),
        p("do", "u64", "gradient dO, like o"),
        DVEC,
        DQ_ACCUM,
        p("seqlen_q", "u32", "query sequence length"),
        p("head_dim", "u32", "the problem's head dim"),
    ],
    cat::<3, 3, 6>(strides!("o"), strides!("do")),
);

const BWD_HEAD: [ParamDesc; 15] = [
    p("q", "u64", "q [batch, seqlen_q, heads, head_dim]"),
    p("k", "u64", "k [batch, seqlen_k, heads_k, head_dim]"),
    p("v", "u64", "v [batch, seqlen_k, heads_k, head_dim]"),
    p(
        "do",
        "u64",
        "gradient dO [batch, seqlen_q, heads, head_dim]",
    ),
    p(
        "lse",
        "u64",
        "forward LSE, f32 [batch, heads, seqlen_q] (natural log; -inf = fully masked row)",
    ),
    DVEC,
    DQ_ACCUM,
    p(
        "dk",
        "u64",
        "dK [batch, seqlen_k, heads_k, head_dim] (written; summed over the heads of a group)",
    ),
    p(
        "dv",
        "u64",
        "dV [batch, seqlen_k, heads_k, head_dim] (written; summed over the heads of a group)",
    ),
    p("seqlen_q", "u32", "query sequence length"),
    p("seqlen_k", "u32", "key/value sequence length"),
    p(
        "head_dim",
        "u32",
        "the problem's head dim: a multiple of 8, at most the kernel's",
    ),
    p("heads_per_kv", "u32", "heads / heads_k"),
    p("scale_log2", "f32", "softmax scale times log2(e)"),
    p(
        "softmax_scale",
        "f32",
        "softmax scale (dK = scale * dS^T Q)",
    ),
];

/// Main backward pass: one CTA per (key block, kv head, batch).
/// Grid: [ceil(seqlen_k / block_n), heads_k, batch].
pub const BWD_PARAMS: [ParamDesc; 33] = cat(
    BWD_HEAD,
    cat::<9, 9, 18>(
        cat::<3, 6, 9>(strides!("q"), cat::<3, 3, 6>(strides!("k"), strides!("v"))),
        cat::<3, 6, 9>(
            strides!("do"),
            cat::<3, 3, 6>(strides!("dk"), strides!("dv")),
        ),
    ),
);

/// Deterministic dQ: one CTA per (query block, head, batch), no atomics.
/// Grid: [ceil(seqlen_q / block_m), heads, batch].
pub const BWD_DQ_PARAMS: [ParamDesc; 29] = cat(
    [
        p("q", "u64", "q [batch, seqlen_q, heads, head_dim]"),
        p("k", "u64", "k [batch, seqlen_k, heads_k, head_dim]"),
        p("v", "u64", "v [batch, seqlen_k, heads_k, head_dim]"),
        p(
            "do",
            "u64",
            "gradient dO [batch, seqlen_q, heads, head_dim]",
        ),
        p("lse", "u64", "forward LSE, f32 [batch, heads, seqlen_q]"),
        DVEC,
        p(
            "dq",
            "u64",
            "dQ [batch, seqlen_q, heads, head_dim] (written)",
        ),
        p("seqlen_q", "u32", "query sequence length"),
        p("seqlen_k", "u32", "key/value sequence length"),
        p("head_dim", "u32", "the problem's head dim"),
        p("heads_per_kv", "u32", "heads / heads_k"),
        p("scale_log2", "f32", "softmax scale times log2(e)"),
        p("softmax_scale", "f32", "softmax scale (dQ = scale * dS K)"),
        p("heads", "u32", "number of query heads"),
    ],
    cat::<9, 6, 15>(
        cat::<3, 6, 9>(strides!("q"), cat::<3, 3, 6>(strides!("k"), strides!("v"))),
        cat::<3, 3, 6>(strides!("do"), strides!("dq")),
    ),
);

/// Postprocess: dq = dq_accum * softmax_scale in the element type.
/// Grid: [ceil(seqlen_q / block_m), heads, batch].
pub const BWD_POST_PARAMS: [ParamDesc; 8] = cat(
    [
        DQ_ACCUM,
        p(
            "dq",
            "u64",
            "dQ [batch, seqlen_q, heads, head_dim] (written)",
        ),
        p("seqlen_q", "u32", "query sequence length"),
        p("head_dim", "u32", "the problem's head dim"),
        p("softmax_scale", "f32", "softmax scale"),
    ],
    strides!("dq"),
);
