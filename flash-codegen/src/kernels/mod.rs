//! Kernel layer: the FlashAttention-2 passes, written against tiles, plus the mma probe.

pub mod fwd;
pub mod mask;
pub mod probe;
pub mod softmax;

use crate::ptx::Module;
use crate::spec::{KernelSpec, Pass};

/// The PTX module (one entry, named `spec.name()`) of a kernel variant.
pub fn module(spec: &KernelSpec) -> Module {
    assert!(spec.is_supported(), "unsupported spec {spec:?}");
    let entry = match spec.pass {
        Pass::Fwd => fwd::build(spec),
    };
    Module {
        target: spec.arch.target(),
        entries: vec![entry],
    }
}
