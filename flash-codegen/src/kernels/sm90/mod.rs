//! Kernel layer, sm_90a path (Hopper: wgmma, TMA, mbarrier; compute capability 9.0 only).
//! Issue 22 builds it in steps: first the probe proving the instruction families on a GPU.

pub mod fwd;
pub mod probe;
