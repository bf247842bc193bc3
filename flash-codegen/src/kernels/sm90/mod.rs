//! Kernel layer, sm_90a path (Hopper: wgmma, TMA, mbarrier; compute capability 9.0 only).
//! Issue 22 builds it in steps: the probe proving the instruction families on a GPU, then
//! the first forward (`fwd`), not yet in the spec key.

pub mod fwd;
mod fwd_blocks;
mod fwd_chain;
mod fwd_consumer;
mod fwd_ctx;
mod fwd_dynamic;
mod fwd_epilogue;
mod fwd_producer;
mod fwd_sched;
mod fwd_softmax;
mod fwd_turn;
mod fwd_variant;
pub mod probe;

use crate::ptx::{AnyReg, B32, B64, Builder, F32, Param, ParamTy, Reg, Ty};

/// An sm_90a entry's parameters, tensor maps (by value: `.param .align 64 .b8 [128]`)
/// then scalars, and their registers: each map's generic address (for TMA), each
/// scalar's value.
struct EntryParams {
    params: Vec<Param<ParamTy>>,
    maps: Vec<Reg<B64>>,
    scalars: Vec<AnyReg>,
}

impl EntryParams {
    /// Declares and reads `maps` and `scalars`, in that order.
    fn load(b: &mut Builder, maps: &[&str], scalars: &[(&str, Ty)]) -> Self {
        let mut params: Vec<Param<ParamTy>> =
            maps.iter().map(|n| Param::bytes(*n, 64, 128)).collect();
        let maps = params.iter().map(|p| b.param_addr(p)).collect();
        let sc: Vec<Param> = scalars.iter().map(|(n, t)| Param::scalar(*n, *t)).collect();
        let scalars = sc.iter().map(|p| b.ld_param(p)).collect();
        params.extend(sc.into_iter().map(Param::<ParamTy>::from));
        EntryParams {
            params,
            maps,
            scalars,
        }
    }

    /// Scalar `i`, a u32.
    fn u32(&self, i: usize) -> Reg<B32> {
        match self.scalars[i] {
            AnyReg::B32(r) => r,
            other => unreachable!("generator bug: scalar {i} is {other:?}, not u32"),
        }
    }

    /// Scalar `i`, a u64.
    fn u64(&self, i: usize) -> Reg<B64> {
        match self.scalars[i] {
            AnyReg::B64(r) => r,
            other => unreachable!("generator bug: scalar {i} is {other:?}, not u64"),
        }
    }

    /// Scalar `i`, an f32.
    fn f32(&self, i: usize) -> Reg<F32> {
        match self.scalars[i] {
            AnyReg::F32(r) => r,
            other => unreachable!("generator bug: scalar {i} is {other:?}, not f32"),
        }
    }
}
