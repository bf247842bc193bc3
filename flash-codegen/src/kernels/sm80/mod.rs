//! Kernel layer, sm_80 path: the FlashAttention-2 kernels on mma.sync, ldmatrix and
//! cp.async (every GPU from sm_80 on), and their machinery: warp tiles and products,
//! streamed operands, warp stores, the exchange layouts, the atomic dQ, the mma probe.

pub mod bwd;
pub mod bwd_atomic_dq;
pub mod bwd_dq;
pub mod bwd_exchange;
pub mod fwd;
pub mod fwd_exchange;
pub mod mainloop;
pub mod probe;
pub mod stream;
pub mod warp;
pub mod warp_store;

use crate::kernels::bwd_elementwise;
use crate::ptx::Module;
use crate::spec::{KernelSpec, Pass};

/// The sm_80 module of `spec`, by pass.
pub fn module(spec: &KernelSpec) -> Module {
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
