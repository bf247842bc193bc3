//! flash-codegen: FlashAttention-2 as a kernel compiler. Pure Rust, no CUDA.
//!
//! Layers, bottom up: [`spec`] (the key naming every variant, its tile table and plan;
//! no PTX), [`ptx`] (typed IR and the printer, the only place with PTX syntax), [`abi`]
//! (parameter types, handles and lists), [`tile`] (fragment, accumulator and
//! shared-memory layouts), [`kernels`] (the passes: what every architecture shares, then
//! `kernels::sm80`), [`manifest`] (what the offline generator writes next to the PTX).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod abi;
pub mod kernels;
pub mod manifest;
pub mod ptx;
pub mod spec;
pub mod tile;

pub use spec::{
    Arch, DType, KernelPlan, KernelSpec, Mask, Pass, Scores, Sm80Layout, TileConfig, Tiling, Tuning,
};

/// The PTX module text of one kernel variant, on its table row.
pub fn generate(spec: &KernelSpec) -> String {
    generate_tuned(spec, &Tuning::NONE)
}

/// The PTX module text of one kernel variant, on `tuning`'s row where it replaces the
/// table's (the kernel keeps its name).
pub fn generate_tuned(spec: &KernelSpec, tuning: &Tuning) -> String {
    ptx::print::module(&kernels::module(&spec.plan(tuning)))
}
