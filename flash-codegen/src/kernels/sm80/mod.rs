//! Kernel layer, sm_80 path: the FlashAttention-2 kernels on mma.sync, ldmatrix and
//! cp.async (every GPU from sm_80 on), and their machinery: warp tiles and products,
//! streamed operands, warp stores, the exchange layouts, the atomic dQ, the mma probe.

pub mod bwd;
pub mod bwd_atomic_dq;
pub mod bwd_dq;
pub mod bwd_exchange;
pub mod fwd;
pub mod fwd_exchange;
pub mod fwd_split;
pub mod key_split;
pub mod mainloop;
pub mod probe;
pub mod stream;
pub mod warp;
pub mod warp_store;

use crate::kernels::{bwd_elementwise, bwd_kv_sum, combine};
use crate::ptx::Module;
use crate::spec::{KernelPlan, Pass};

/// The sm_80 module of a plan, by pass.
pub fn module(plan: &KernelPlan) -> Module {
    let spec = &plan.spec;
    // (a paged or varlen pass runs its dense pass's body; `Params` gives it the rows)
    let entry = match spec.pass.tile_pass() {
        Pass::Fwd => fwd::build(plan),
        Pass::BwdPre => bwd_elementwise::build_pre(plan),
        Pass::BwdPost => bwd_elementwise::build_post(plan),
        Pass::BwdKvSum => bwd_kv_sum::build(plan),
        Pass::BwdDq => bwd_dq::build(plan),
        Pass::Bwd => bwd::build(plan),
        Pass::FwdSplit => fwd_split::build(plan),
        Pass::FwdCombine => combine::build(plan),
        p => unreachable!("{p:?} is not a tile pass"),
    };
    Module {
        target: crate::kernels::target(spec.arch),
        entries: vec![entry],
    }
}
