//! flash-ptx: FlashAttention forward and backward as generated PTX, from `cargo build`.
//! This facade re-exports the code generator ([`codegen`]), the runtime ([`runtime`]) and
//! the compile-time macro ([`flash_kernel!`]), so users depend on one crate. The README
//! follows; its code blocks are compiled as this crate's doctests.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub use flash_codegen as codegen;
/// Compile-time kernel variants: see the macro's documentation.
pub use flash_macros::flash_kernel;
pub use flash_runtime as runtime;
/// The `half` crate whose `f16` and `bf16` the kernels take.
pub use flash_runtime::half;
