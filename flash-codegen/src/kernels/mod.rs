//! Kernel layer: what every architecture shares (online softmax, masks, block
//! scheduling, parameters, the backward's elementwise passes), and the dispatch to each
//! architecture's kernels (`sm80`: mma.sync, ldmatrix, cp.async).

pub mod bwd_elementwise;
pub mod bwd_kv_sum;
pub mod combine;
pub mod exp2;
pub mod mask;
pub mod params;
pub mod schedule;
pub mod scores;
pub mod sm80;
pub mod sm90;
pub mod softmax;
pub mod varlen;

use crate::ptx::{HalfFmt, Module, Target};
use crate::spec::{Arch, DType, KernelPlan};

/// The PTX module (one entry, named after the spec) of a planned kernel variant: the
/// kernels of its architecture, by pass.
pub fn module(plan: &KernelPlan) -> Module {
    match plan.spec.arch {
        Arch::Sm80 => sm80::module(plan),
    }
}

/// The PTX `.target` an architecture's kernels are written for.
pub fn target(arch: Arch) -> Target {
    match arch {
        Arch::Sm80 => Target::Sm80,
    }
}

/// The tensor-core input format of an element type.
pub fn half_fmt(dtype: DType) -> HalfFmt {
    match dtype {
        DType::F16 => HalfFmt::F16,
        DType::Bf16 => HalfFmt::Bf16,
    }
}
