//! ABI layer: the varlen passes ([`Pass::is_varlen`](crate::spec::Pass::is_varlen)):
//! packed variable-length sequences, forward and backward.
//!
//! **Layout.** q, o, dO, dq are `[total_q, heads, head_dim]` and k, v, dk, dv `[total_k,
//! heads_k, head_dim]` (row and head strides free, the last dim contiguous); sequence `b`
//! is rows `cu_seqlens_q[b] .. cu_seqlens_q[b + 1]` of the query-side tensors and
//! `cu_seqlens_k[b] .. cu_seqlens_k[b + 1]` of the key-side ones, and is its own attention
//! problem (the causal mask bottom-right per sequence). lse and D are f32 `[heads,
//! total_q]`: row `cu_seqlens_q[b] + i` of head `h` at `h * total_q + cu_seqlens_q[b] + i`.
//!
//! **Grid.** `[ceil(max_seqlen_q / block_m), heads, batch]` (the main backward pass:
//! `[ceil(max_seqlen_k / block_n), heads_k, batch]`); a CTA past its sequence's end
//! exits. `max_seqlen_q` / `max_seqlen_k` must be at least every sequence's length:
//! rows of a longer sequence past them are not computed.
//!
//! **Offsets are device data and may hold anything.** Each kernel reads
//! `cu_seqlens_q[b]` and `cu_seqlens_q[b + 1]` (likewise for k) and clamps them to
//! `[0, total_q]` (`[0, total_k]`), the end to at least the start, so no content makes a
//! kernel read or write outside its buffers (overlapping or decreasing offsets give
//! meaningless values, never an out-of-bounds access).
//!
//! **dq_accum** (atomic mode) holds, per query head, `16 ceil((total_q + 16 batch) / 16)`
//! rows of `head_dim` f32 in fragment order: sequence `b` starts at row
//! `16 floor((cu_seqlens_q[b] + 16 b) / 16)`, a whole 16-row tile of its own (the dense
//! layout of a batch-1 problem of `total_q + 16 batch` rows).

use super::args::{
    CU_SEQLENS_K, CU_SEQLENS_Q, DK, DO, DQ, DQ_ACCUM, DV, DVEC, HEAD_DIM, HEADS, HEADS_PER_KV, K,
    LSE, O, Q, SCALE_LOG2, SOFTMAX_SCALE, TOTAL_K, TOTAL_Q, V,
};
use super::{ParamDesc, cat};

const CU_Q: ParamDesc = CU_SEQLENS_Q.desc(
    "device pointer to i32 [batch + 1]: sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] (each clamped to [0, total_q])",
);
const CU_K: ParamDesc = CU_SEQLENS_K.desc(
    "device pointer to i32 [batch + 1]: sequence b's keys are rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] (each clamped to [0, total_k])",
);
const TOTAL_Q_DESC: ParamDesc = TOTAL_Q.desc("rows of the packed q, o (dO, dq) buffers");
const TOTAL_K_DESC: ParamDesc = TOTAL_K.desc("rows of the packed k, v (dk, dv) buffers");
const DVEC_DESC: ParamDesc = DVEC.desc("D = rowsum(dO * O), f32 [heads, total_q]");
const DQ_ACCUM_DESC: ParamDesc = DQ_ACCUM.desc(
    "f32 dQ accumulator (unscaled), heads * 16 ceil((total_q + 16 batch) / 16) * head_dim elements in MMA-fragment order (opaque scratch: zeroed by bwdprevarlen, read by bwdpostvarlen), or 0 (deterministic mode)",
);

/// Varlen forward ([`Pass::FwdVarlen`](crate::spec::Pass::FwdVarlen)), in launch order.
pub const FWD_VARLEN_PARAMS: [ParamDesc; 21] = cat(
    [
        Q.ptr
            .desc("device pointer to q [total_q, heads, head_dim], 16-byte aligned"),
        K.ptr
            .desc("device pointer to k [total_k, heads_k, head_dim], 16-byte aligned"),
        V.ptr
            .desc("device pointer to v [total_k, heads_k, head_dim], 16-byte aligned"),
        O.ptr.desc(
            "device pointer to o [total_q, heads, head_dim] (written: the rows of every sequence), 16-byte aligned",
        ),
        LSE.desc("device pointer to lse f32 [heads, total_q] (written, natural log), or 0 to skip"),
        CU_Q,
        CU_K,
        TOTAL_Q_DESC,
        TOTAL_K_DESC,
        HEAD_DIM.desc("the problem's head dim: a multiple of 8, at most the kernel's"),
        HEADS.desc("number of query heads"),
        HEADS_PER_KV.desc("heads / heads_k (1 = MHA, heads = MQA)"),
        SCALE_LOG2.desc("softmax scale times log2(e)"),
    ],
    cat::<4, 4, 8>(
        cat::<2, 2, 4>(Q.packed_strides(), K.packed_strides()),
        cat::<2, 2, 4>(V.packed_strides(), O.packed_strides()),
    ),
);

/// Varlen backward preprocess: D per query row, dq_accum zeroed when non-null.
pub const BWD_PRE_VARLEN_PARAMS: [ParamDesc; 11] = cat(
    [
        O.ptr.desc("forward output o [total_q, heads, head_dim]"),
        DO.ptr.desc("gradient dO, like o"),
        DVEC_DESC,
        DQ_ACCUM_DESC,
        CU_Q,
        TOTAL_Q_DESC,
        HEAD_DIM.desc("the problem's head dim"),
    ],
    cat::<2, 2, 4>(O.packed_strides(), DO.packed_strides()),
);

/// Varlen backward main pass: one CTA per (key block, kv head, sequence).
pub const BWD_VARLEN_PARAMS: [ParamDesc; 29] = cat(
    [
        Q.ptr.desc("q [total_q, heads, head_dim]"),
        K.ptr.desc("k [total_k, heads_k, head_dim]"),
        V.ptr.desc("v [total_k, heads_k, head_dim]"),
        DO.ptr.desc("gradient dO [total_q, heads, head_dim]"),
        LSE.desc("forward LSE, f32 [heads, total_q] (natural log; -inf = fully masked row)"),
        DVEC_DESC,
        DQ_ACCUM_DESC,
        DK.ptr.desc(
            "dK [total_k, heads_k, head_dim] (written: the rows of every sequence; summed over a group's heads)",
        ),
        DV.ptr
            .desc("dV [total_k, heads_k, head_dim] (written, like dK)"),
        CU_Q,
        CU_K,
        TOTAL_Q_DESC,
        TOTAL_K_DESC,
        HEAD_DIM.desc("the problem's head dim: a multiple of 8, at most the kernel's"),
        HEADS_PER_KV.desc("heads / heads_k"),
        SCALE_LOG2.desc("softmax scale times log2(e)"),
        SOFTMAX_SCALE.desc("softmax scale (dK = scale * dS^T Q)"),
    ],
    cat::<6, 6, 12>(
        cat::<2, 4, 6>(Q.packed_strides(), cat::<2, 2, 4>(K.packed_strides(), V.packed_strides())),
        cat::<2, 4, 6>(DO.packed_strides(), cat::<2, 2, 4>(DK.packed_strides(), DV.packed_strides())),
    ),
);

/// Varlen deterministic dQ: one CTA per (query block, head, sequence), no atomics.
pub const BWD_DQ_VARLEN_PARAMS: [ParamDesc; 26] = cat(
    [
        Q.ptr.desc("q [total_q, heads, head_dim]"),
        K.ptr.desc("k [total_k, heads_k, head_dim]"),
        V.ptr.desc("v [total_k, heads_k, head_dim]"),
        DO.ptr.desc("gradient dO [total_q, heads, head_dim]"),
        LSE.desc("forward LSE, f32 [heads, total_q]"),
        DVEC_DESC,
        DQ.ptr
            .desc("dQ [total_q, heads, head_dim] (written: the rows of every sequence)"),
        CU_Q,
        CU_K,
        TOTAL_Q_DESC,
        TOTAL_K_DESC,
        HEAD_DIM.desc("the problem's head dim"),
        HEADS_PER_KV.desc("heads / heads_k"),
        SCALE_LOG2.desc("softmax scale times log2(e)"),
        SOFTMAX_SCALE.desc("softmax scale (dQ = scale * dS K)"),
        HEADS.desc("number of query heads"),
    ],
    cat::<6, 4, 10>(
        cat::<2, 4, 6>(
            Q.packed_strides(),
            cat::<2, 2, 4>(K.packed_strides(), V.packed_strides()),
        ),
        cat::<2, 2, 4>(DO.packed_strides(), DQ.packed_strides()),
    ),
);

/// Varlen backward postprocess: dq = dq_accum * softmax_scale in the element type.
pub const BWD_POST_VARLEN_PARAMS: [ParamDesc; 8] = cat(
    [
        DQ_ACCUM_DESC,
        DQ.ptr
            .desc("dQ [total_q, heads, head_dim] (written: the rows of every sequence)"),
        CU_Q,
        TOTAL_Q_DESC,
        HEAD_DIM.desc("the problem's head dim"),
        SOFTMAX_SCALE.desc("softmax scale"),
    ],
    DQ.packed_strides(),
);

/// Rows of the varlen dq accumulator per query head: `16 ceil((total_q + 16 batch) / 16)`.
pub fn accum_rows(total_q: usize, batch: usize) -> usize {
    (total_q + 16 * batch).div_ceil(16) * 16
}

/// The first accumulator row of sequence `b` starting at query row `start`.
pub fn accum_row0(start: usize, b: usize) -> usize {
    (start + 16 * b) / 16 * 16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each sequence's accumulator rows (whole 16-row tiles) lie inside the buffer and
    /// after the previous sequence's, for any non-decreasing offsets.
    #[test]
    fn accumulator_regions_are_disjoint() {
        for cu in [
            vec![0, 0, 1, 17, 17, 40, 41],
            vec![0, 15, 16, 31, 33, 64],
            vec![0, 100],
            vec![0, 0, 0],
        ] {
            let (batch, total) = (cu.len() - 1, *cu.last().unwrap());
            let mut end = 0;
            for b in 0..batch {
                let r0 = accum_row0(cu[b], b);
                assert!(r0 % 16 == 0 && r0 >= end, "{cu:?}: sequence {b}");
                end = r0 + (cu[b + 1] - cu[b]).div_ceil(16) * 16;
            }
            assert!(end <= accum_rows(total, batch), "{cu:?}");
        }
    }
}
