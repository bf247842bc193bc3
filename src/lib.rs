//! flash-ptx: FlashAttention-2 forward and backward as generated PTX, from `cargo build`.
//!
//! This facade re-exports the code generator and the runtime so users depend on one crate.

pub use flash_codegen as codegen;
/// Compile-time kernel variants: see the macro's documentation.
pub use flash_macros::flash_kernel;
pub use flash_runtime as runtime;
