//! flash-codegen: FlashAttention-2 as a kernel compiler. Pure Rust, no CUDA.
//!
//! Layers, bottom up: [`ptx`] (typed IR and the printer), [`tile`] (fragment layouts and
//! shared-memory layouts), [`kernels`] (the FA2 passes), [`spec`] (the key naming every
//! variant and its tile table), [`abi`] (parameter lists), [`manifest`] (what the offline
//! generator writes next to the PTX).

#![warn(missing_docs)]

pub mod abi;
pub mod kernels;
pub mod manifest;
pub mod ptx;
pub mod spec;
pub mod tile;

pub use spec::{Arch, DType, KernelSpec, Pass, TileConfig, Tiling};

/// The PTX module text of one kernel variant.
pub fn generate(spec: &KernelSpec) -> String {
    ptx::print::module(&kernels::module(spec))
}
