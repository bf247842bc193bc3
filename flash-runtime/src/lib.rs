//! flash-runtime: runs flash-ptx's generated FlashAttention-2 kernels on NVIDIA GPUs.
//!
//! [`FlashAttention`] JIT-loads the PTX of each kernel variant through the CUDA driver
//! (via [`cudarc`]) on first use, caches it per [`flash_codegen::KernelSpec`], checks every
//! argument ([`validate`]) and launches. No CUDA toolkit is needed to build; the driver
//! library is loaded at run time ([`driver_present`] tells whether it exists).
//!
//! [`FlashAttention::forward`] computes o (and the lse); [`FlashAttention::backward`] the
//! gradients dq, dk, dv from the forward's o and lse (atomic mode by default, or bitwise
//! reproducible with [`BwdParams::deterministic`]; see the example there). [`mod@reference`]
//! holds float64 CPU references of both for tests.
//!
//! ```no_run
//! use flash_runtime::{FlashAttention, FwdParams, Tensor4, Tensor4Mut};
//! # fn main() -> flash_runtime::Result<()> {
//! let rt = FlashAttention::on_device(0)?;
//! let stream = rt.context().default_stream();
//! let (b, s, h, d) = (2, 1024, 16, 128);
//! let x = vec![half::bf16::from_f32(0.5); b * s * h * d];
//! let (q, k, v) = (stream.clone_htod(&x)?, stream.clone_htod(&x)?, stream.clone_htod(&x)?);
//! let mut o = stream.alloc_zeros::<half::bf16>(b * s * h * d)?;
//! let mut lse = stream.alloc_zeros::<f32>(b * h * s)?;
//! rt.forward(
//!     &stream,
//!     &Tensor4::contiguous(&q, [b, s, h, d]),
//!     &Tensor4::contiguous(&k, [b, s, h, d]),
//!     &Tensor4::contiguous(&v, [b, s, h, d]),
//!     &mut Tensor4Mut::contiguous(&mut o, [b, s, h, d]),
//!     Some(&mut lse),
//!     &FwdParams { causal: true, ..Default::default() },
//! )?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod attention;
mod backward;
mod embedded;
pub mod error;
mod jit;
mod probe;
pub mod reference;
pub mod rng;
pub mod tensor;
pub mod validate;

pub use attention::{FlashAttention, driver_present};
pub use backward::BwdScratch;
pub use embedded::EmbeddedKernel;
pub use error::{FlashError, Result};
pub use tensor::{Element, IntoDeviceView, IntoDeviceViewMut, Tensor4, Tensor4Mut};
pub use validate::{
    BwdParams, BwdPlan, FwdParams, FwdPlan, LaunchPlan, ParamValue, plan_bwd, plan_bwd_with,
    plan_fwd, plan_fwd_on,
};

/// The cudarc version this crate is built against, re-exported so users name the same types.
pub use cudarc;
/// The code generator (specs, ABI tables, PTX).
pub use flash_codegen;
