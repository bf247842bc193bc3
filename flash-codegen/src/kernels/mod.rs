//! Kernel layer: what every architecture shares (online softmax, masks, block
//! scheduling, parameters, the backward's elementwise passes), and the dispatch to each
//! architecture's kernels (`sm80`: mma.sync, ldmatrix, cp.async).

pub mod bwd_elementwise;
pub mod mask;
pub mod params;
pub mod schedule;
pub mod sm80;
pub mod softmax;

use crate::ptx::Module;
use crate::spec::{Arch, KernelSpec};

/// The PTX module (one entry, named `spec.name()`) of a kernel variant: the kernels of
/// its architecture, by pass.
pub fn module(spec: &KernelSpec) -> Module {
    assert!(spec.is_supported(), "unsupported spec {spec:?}");
    match spec.arch {
        Arch::Sm80 => sm80::module(spec),
    }
}
