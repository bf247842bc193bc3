//! ABI layer: each pass's kernel parameters (name, PTX type, meaning) and launch geometry,
//! written once and read by the kernels, the printer, the manifest and the runtime.

use serde::Serialize;

use crate::ptx::{Param, Ty};
use crate::spec::{KernelPlan, KernelSpec, Pass};

/// The three stride parameters of tensor `$t`: batch (u64), row and head (u32).
macro_rules! strides {
    ($t:literal) => {
        [
            p(
                concat!($t, "_batch_stride"),
                "u64",
                concat!("elements between batches of ", $t),
            ),
            p(
                concat!($t, "_row_stride"),
                "u32",
                concat!("elements between sequence positions of ", $t),
            ),
            p(
                concat!($t, "_head_stride"),
                "u32",
                concat!("elements between heads of ", $t),
            ),
        ]
    };
}

mod bwd;
pub use bwd::{BWD_DQ_PARAMS, BWD_PARAMS, BWD_POST_PARAMS, BWD_PRE_PARAMS};

/// One kernel parameter. `ty` is the PTX type: `u64` pointers, `u32`, `f32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ParamDesc {
    /// The parameter's name in the PTX entry and in the manifest (`q`, `seqlen_q`, `q_row_stride`, ...).
    pub name: &'static str,
    #[serde(rename = "type")]
    /// The PTX type: `u64` (pointers, batch strides), `u32` or `f32`.
    pub ty: &'static str,
    /// What the caller passes, in words (shape, units, optionality).
    pub meaning: &'static str,
}

pub(crate) const fn p(name: &'static str, ty: &'static str, meaning: &'static str) -> ParamDesc {
    ParamDesc { name, ty, meaning }
}

/// `a` then `b`, in a const context.
const fn cat<const A: usize, const B: usize, const C: usize>(
    a: [ParamDesc; A],
    b: [ParamDesc; B],
) -> [ParamDesc; C] {
    assert!(A + B == C);
    let mut out = [p("", "", ""); C];
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

/// Forward parameters, in launch order. Strides are in elements; the last dim of every
/// tensor is contiguous.
pub const FWD_PARAMS: [ParamDesc; 23] = cat(
    FWD_HEAD,
    cat::<6, 6, 12>(
        cat::<3, 3, 6>(strides!("q"), strides!("k")),
        cat::<3, 3, 6>(strides!("v"), strides!("o")),
    ),
);

/// The forward's pointers and scalars (its strides follow).
const FWD_HEAD: [ParamDesc; 11] = [
    p(
        "q",
        "u64",
        "device pointer to q [batch, seqlen_q, heads, head_dim], 16-byte aligned",
    ),
    p(
        "k",
        "u64",
        "device pointer to k [batch, seqlen_k, heads_k, head_dim], 16-byte aligned",
    ),
    p(
        "v",
        "u64",
        "device pointer to v [batch, seqlen_k, heads_k, head_dim], 16-byte aligned",
    ),
    p(
        "o",
        "u64",
        "device pointer to o [batch, seqlen_q, heads, head_dim] (written), 16-byte aligned",
    ),
    p(
        "lse",
        "u64",
        "device pointer to lse f32 [batch, heads, seqlen_q] (written, natural log), or 0 to skip",
    ),
    p("seqlen_q", "u32", "query sequence length"),
    p("seqlen_k", "u32", "key/value sequence length"),
    p(
        "head_dim",
        "u32",
        "the problem's head dim: a multiple of 8, at most the kernel's",
    ),
    p("heads", "u32", "number of query heads"),
    p(
        "heads_per_kv",
        "u32",
        "heads / heads_k (1 = MHA, heads = MQA)",
    ),
    p(
        "scale_log2",
        "f32",
        "softmax scale times log2(e) (default 1/sqrt(head_dim) * 1.4426950408889634)",
    ),
];

/// The parameter list of a pass.
pub fn params(pass: Pass) -> &'static [ParamDesc] {
    match pass {
        Pass::Fwd => &FWD_PARAMS,
        Pass::BwdPre => &bwd::BWD_PRE_PARAMS,
        Pass::Bwd => &bwd::BWD_PARAMS,
        Pass::BwdDq => &bwd::BWD_DQ_PARAMS,
        Pass::BwdPost => &bwd::BWD_POST_PARAMS,
    }
}

/// The IR parameters of a pass (what the entry declares).
pub fn ir_params(pass: Pass) -> Vec<Param> {
    params(pass)
        .iter()
        .map(|d| Param {
            name: d.name.to_string(),
            ty: match d.ty {
                "u64" => Ty::U64,
                "u32" => Ty::U32,
                "f32" => Ty::F32,
                t => panic!("generator bug: parameter type {t}"),
            },
        })
        .collect()
}

/// Launch geometry of a kernel: block size, dynamic shared memory and the grid formula.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Launch {
    /// Threads per CTA (x, y, z).
    pub block: [u32; 3],
    /// The grid per dimension as a formula over problem sizes and tiles, e.g.
    /// `ceil(seqlen_q / block_m)`, `heads`, `batch`.
    pub grid: [&'static str; 3],
    /// Dynamic shared memory bytes of the launch ([`KernelSpec::smem_bytes`]).
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
            grid: ["ceil(seqlen_k / block_n)", "heads_k", "batch"],
            dynamic_smem_bytes: plan.smem.bytes,
        },
    }
}

/// The grid of a pass for a problem (batch, seqlen_q, seqlen_k, heads, heads_k).
pub fn grid(
    spec: &KernelSpec,
    batch: u32,
    seqlen_q: u32,
    seqlen_k: u32,
    heads: u32,
    heads_k: u32,
) -> [u32; 3] {
    let t = spec.tiles();
    match spec.pass {
        Pass::Bwd => [seqlen_k.div_ceil(t.block_n()), heads_k, batch],
        _ => [seqlen_q.div_ceil(t.block_m()), heads, batch],
    }
}

/// The grid for a forward launch.
pub fn fwd_grid(spec: &KernelSpec, seqlen_q: u32, heads: u32, batch: u32) -> [u32; 3] {
    [seqlen_q.div_ceil(spec.tiles().block_m()), heads, batch]
}
