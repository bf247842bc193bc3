//! Kernel layer: the FlashAttention-2 passes, written against tiles, plus the mma probe.

pub mod bwd;
pub mod bwd_atomic_dq;
pub mod bwd_dq;
pub mod bwd_elementwise;
pub mod bwd_exchange;
pub mod fwd;
pub mod fwd_exchange;
pub mod mainloop;
pub mod mask;
pub mod params;
pub mod probe;
pub mod softmax;
pub mod stream;
pub mod warp;
pub mod warp_store;

use crate::ptx::Module;
use crate::spec::{KernelSpec, Pass};

/// The PTX module (one entry, named `spec.name()`) of a kernel variant.
pub fn module(spec: &KernelSpec) -> Module {
    assert!(spec.is_supported(), "unsupported spec {spec:?}");
    let entry = match spec.pass {
        Pass::Fwd => fwd::build(spec),
        Pass::BwdPre => bwd_elementwise::build_pre(spec),
        Pass::BwdPost => bwd_elementwise::build_post(spec),
        Pass::BwdDq => bwd_dq::build(spec),
        Pass::Bwd => bwd::build(spec),
    };
    Module {
        target: spec.arch.target(),
        entries: vec![entry],
    }
}
