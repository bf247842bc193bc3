//! ABI layer: each pass's kernel parameters (name, type, meaning) and launch geometry,
//! written once and read by the kernels, the printer, the manifest and the runtime.
//!
//! A parameter's name is written once, in its handle ([`args`]: [`SEQLEN_Q`], [`Q`], ...);
//! the pass tables ([`FWD_PARAMS`], ...) are built from the handles, and a parameter's PTX,
//! manifest and numpy types and size all follow from its [`AbiTy`].

use serde::Serialize;

use crate::ptx::{Param, ParamTy};
use crate::spec::{KernelPlan, KernelSpec, Mask, Pass, Scores};

pub mod args;
mod bwd;
pub mod decode;
mod fwd;
#[cfg(test)]
mod tests;
mod types;
pub mod varlen;
pub use args::{
    ALIBI_BATCH_STRIDE, ALIBI_SLOPES, BLOCK_TABLE, CU_SEQLENS_K, CU_SEQLENS_Q, DK, DKV_PARTIAL, DO,
    DQ, DQ_ACCUM, DV, DVEC, GROUP_SPLIT_SHIFT, HEAD_DIM, HEADS, HEADS_PER_KV, K, LSE, LSE_ACCUM,
    MAX_PAGES, NUM_PAGES, NUM_SPLITS, O, O_ACCUM, PAGE_SHIFT, Q, SCALE_LOG2, SEQLEN_K, SEQLEN_Q,
    SEQLENS_K, SOFTCAP, SOFTMAX_SCALE, TENSORS, TOTAL_K, TOTAL_Q, V, WINDOW_LEFT, WINDOW_RIGHT,
};
pub use bwd::{BWD_DQ_PARAMS, BWD_KV_SUM_PARAMS, BWD_PARAMS, BWD_POST_PARAMS, BWD_PRE_PARAMS};
pub use decode::{FWD_COMBINE_PARAMS, FWD_PAGED_PARAMS, FWD_SPLIT_PARAMS};
pub use fwd::{ALIBI_PARAMS, FWD_PARAMS, SOFTCAP_PARAMS, WINDOW_PARAMS};
pub use types::{AbiTy, Arg, ArgKind, TensorArgs};
pub use varlen::{
    BWD_DQ_VARLEN_PARAMS, BWD_POST_VARLEN_PARAMS, BWD_PRE_VARLEN_PARAMS, BWD_VARLEN_PARAMS,
    FWD_VARLEN_PARAMS,
};

/// One kernel parameter: a row of a pass's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ParamDesc {
    /// The parameter's name in the PTX entry and in the manifest (`q`, `seqlen_q`, `q_row_stride`, ...).
    pub name: &'static str,
    /// Its type (serialized as the manifest name: `u64`, `u32`, `f32`).
    #[serde(rename = "type")]
    pub ty: AbiTy,
    /// What the caller passes, in words (shape, units, optionality).
    pub meaning: &'static str,
}

impl ParamDesc {
    /// A parameter row. The pass tables build theirs from handles ([`Arg::desc`],
    /// [`TensorArgs::strides`]) so that each name is written once.
    pub const fn new(name: &'static str, ty: AbiTy, meaning: &'static str) -> Self {
        ParamDesc { name, ty, meaning }
    }
    /// What the entry declares for it (`.param .u64 q`, `.param .align 64 .b8 tm[128]`).
    pub fn ir(&self) -> Param<ParamTy> {
        Param {
            name: self.name.to_string(),
            ty: self.ty.param_ty(),
        }
    }
}

/// `a` then `b`, in a const context.
const fn cat<const A: usize, const B: usize, const C: usize>(
    a: [ParamDesc; A],
    b: [ParamDesc; B],
) -> [ParamDesc; C] {
    assert!(A + B == C);
    let mut out = [ParamDesc::new("", AbiTy::U32, ""); C];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < C {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

/// The parameter list of a pass.
pub fn params(pass: Pass) -> &'static [ParamDesc] {
    match pass {
        Pass::Fwd => &FWD_PARAMS,
        Pass::BwdPre => &BWD_PRE_PARAMS,
        Pass::Bwd => &BWD_PARAMS,
        Pass::BwdDq => &BWD_DQ_PARAMS,
        Pass::BwdPost => &BWD_POST_PARAMS,
        Pass::BwdKvSum => &BWD_KV_SUM_PARAMS,
        Pass::FwdSplit => &FWD_SPLIT_PARAMS,
        Pass::FwdCombine => &FWD_COMBINE_PARAMS,
        Pass::FwdPaged => &FWD_PAGED_PARAMS,
        Pass::FwdVarlen => &FWD_VARLEN_PARAMS,
        Pass::BwdPreVarlen => &BWD_PRE_VARLEN_PARAMS,
        Pass::BwdVarlen => &BWD_VARLEN_PARAMS,
        Pass::BwdDqVarlen => &BWD_DQ_VARLEN_PARAMS,
        Pass::BwdPostVarlen => &BWD_POST_VARLEN_PARAMS,
    }
}

/// The parameters of `spec`'s kernel, in launch order: its pass's ([`params`]), then,
/// for a sliding window ([`Mask::Local`]), [`WINDOW_PARAMS`], then, for a softcap
/// ([`Scores::Softcap`]), [`SOFTCAP_PARAMS`], for ALiBi ([`Scores::Alibi`]),
/// [`ALIBI_PARAMS`].
pub fn params_of(spec: &KernelSpec) -> Vec<ParamDesc> {
    let mut v = params(spec.pass).to_vec();
    if spec.mask == Mask::Local {
        v.extend(WINDOW_PARAMS);
    }
    match spec.scores {
        Scores::Plain => {}
        Scores::Softcap => v.extend(SOFTCAP_PARAMS),
        Scores::Alibi => v.extend(ALIBI_PARAMS),
    }
    v
}

/// The IR parameters of `descs`, in order: what an entry taking them declares.
pub fn ir_params_of(descs: &[ParamDesc]) -> Vec<Param<ParamTy>> {
    descs.iter().map(ParamDesc::ir).collect()
}

/// Launch geometry of a kernel: block size, dynamic shared memory and the grid formula.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Launch {
    /// Threads per CTA (x, y, z).
    pub block: [u32; 3],
    /// The grid per dimension as a formula over problem sizes and tiles, e.g.
    /// `ceil(seqlen_q / block_m)`, `heads`, `batch`.
    pub grid: [&'static str; 3],
    /// Dynamic shared memory bytes of the launch (the plan's `smem.bytes`).
    pub dynamic_smem_bytes: u32,
}

/// The launch geometry of a planned kernel: block from its tiles, grid over query blocks
/// (key blocks for [`Pass::Bwd`]), dynamic shared memory.
pub fn launch(plan: &KernelPlan) -> Launch {
    let t = &plan.tiles;
    match plan.spec.pass {
        Pass::Fwd | Pass::BwdPre | Pass::BwdDq | Pass::BwdPost => Launch {
            block: [t.threads(), 1, 1],
            grid: ["ceil(seqlen_q / block_m)", "heads", "batch"],
            dynamic_smem_bytes: plan.smem.bytes,
        },
        Pass::Bwd => Launch {
            block: [t.threads(), 1, 1],
            grid: [
                "ceil(seqlen_k / block_n)",
                "heads_k << group_split_shift",
                "batch",
            ],
            dynamic_smem_bytes: plan.smem.bytes,
        },
        Pass::BwdKvSum => Launch {
            block: [t.threads(), 1, 1],
            grid: ["ceil(seqlen_k / block_m)", "heads_k", "batch"],
            dynamic_smem_bytes: plan.smem.bytes,
        },
        Pass::FwdSplit | Pass::FwdPaged => Launch {
            block: [t.threads(), 1, 1],
            grid: [
                "ceil(seqlen_q * heads_per_kv / block_m)",
                "heads_k",
                "batch * num_splits",
            ],
            dynamic_smem_bytes: plan.smem.bytes,
        },
        Pass::FwdCombine => Launch {
            block: [t.threads(), 1, 1],
            grid: ["ceil(heads * seqlen_q / block_m)", "batch", "1"],
            dynamic_smem_bytes: plan.smem.bytes,
        },
        Pass::BwdVarlen => Launch {
            block: [t.threads(), 1, 1],
            grid: ["ceil(max_seqlen_k / block_n)", "heads_k", "batch"],
            dynamic_smem_bytes: plan.smem.bytes,
        },
        Pass::FwdVarlen | Pass::BwdPreVarlen | Pass::BwdDqVarlen | Pass::BwdPostVarlen => Launch {
            block: [t.threads(), 1, 1],
            grid: ["ceil(max_seqlen_q / block_m)", "heads", "batch"],
            dynamic_smem_bytes: plan.smem.bytes,
        },
    }
}

/// The grid of a pass for a problem (batch, seqlen_q, seqlen_k, heads, heads_k; for a
/// varlen pass the longest sequences, `max_seqlen_q` and `max_seqlen_k`); `None` for the
/// split-KV passes, whose grids also take the split count ([`decode::split_grid`],
/// [`decode::combine_grid`]). [`Pass::Bwd`]'s is the grid of one group split: with
/// `1 << group_split_shift` of them its y is `heads_k << group_split_shift`.
pub fn grid(
    spec: &KernelSpec,
    batch: u32,
    seqlen_q: u32,
    seqlen_k: u32,
    heads: u32,
    heads_k: u32,
) -> Option<[u32; 3]> {
    let t = spec.tiles();
    match spec.pass {
        Pass::Bwd | Pass::BwdVarlen => Some([seqlen_k.div_ceil(t.block_n()), heads_k, batch]),
        Pass::BwdKvSum => Some([seqlen_k.div_ceil(t.block_m()), heads_k, batch]),
        Pass::FwdSplit | Pass::FwdCombine | Pass::FwdPaged => None,
        _ => Some([seqlen_q.div_ceil(t.block_m()), heads, batch]),
    }
}

/// The grid for a forward launch.
pub fn fwd_grid(spec: &KernelSpec, seqlen_q: u32, heads: u32, batch: u32) -> [u32; 3] {
    [seqlen_q.div_ceil(spec.tiles().block_m()), heads, batch]
}
