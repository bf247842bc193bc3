//! Names flash-ptx's runtime types through the cudarc that candle-core 0.11 configures,
//! so `cargo check` type-checks flash-runtime against those bindings.

use flash_ptx::runtime::cudarc::driver::CudaContext;
use flash_ptx::runtime::{FlashAttention, FlashError};

/// A runtime on candle's context: one cudarc, shared (`candle_core::cuda_backend::cudarc`).
pub fn runtime_on(ctx: std::sync::Arc<CudaContext>) -> Result<FlashAttention, FlashError> {
    FlashAttention::new(ctx)
}

/// The crate's cudarc is flash-runtime's (one copy in the graph, same types).
pub fn same_cudarc(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
) -> &std::sync::Arc<CudaContext> {
    ctx
}
