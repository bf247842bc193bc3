//! flash-runtime: runs flash-ptx's generated FlashAttention-2 kernels on NVIDIA GPUs.
//!
//! [`FlashAttention`] JIT-loads the PTX of each kernel variant through the CUDA driver
//! (via [`cudarc`]) on first use, caches it per [`flash_codegen::KernelSpec`], checks every
//! argument ([`validate`]) and launches. No CUDA toolkit is needed to build; the driver
//! library is loaded at run time ([`driver_present`] tells whether it exists).
//!
//! [`FlashAttention::forward`] computes o and the lse, [`FlashAttention::backward`] the
//! gradients dq, dk, dv from the forward's o and lse (atomic mode by default, or bitwise
//! reproducible with [`BwdOptions::deterministic`]); both allocate their outputs, and
//! [`FlashAttention::forward_into`] / [`FlashAttention::backward_into`] write into
//! preallocated (possibly strided) buffers; on compute capability 9.0 the forward runs
//! the sm_90a kernel where it applies ([`ForwardArch`]). One [`AttnParams`] (mask, scale)
//! serves both passes. [`FlashAttention::forward_kvcache`] (and `_into`) runs the forward
//! against a KV cache (decoding, per-sequence key counts, the keys split across CTAs:
//! [`KvOptions`]), and [`FlashAttention::forward_kvcache_paged`] against a paged one
//! ([`PagedKv`]: page pools and a page table). [`mod@reference`] holds float64 CPU references of all three for tests.
//!
//! ```no_run
//! use flash_runtime::{AttnParams, FlashAttention, Tensor4};
//! # fn main() -> flash_runtime::Result<()> {
//! let rt = FlashAttention::on_device(0)?;
//! let stream = rt.context().default_stream();
//! let (b, s, h, d) = (2, 1024, 16, 128);
//! let x = vec![flash_runtime::half::bf16::from_f32(0.5); b * s * h * d];
//! let (q, k, v) = (stream.clone_htod(&x)?, stream.clone_htod(&x)?, stream.clone_htod(&x)?);
//! let t = |x| Tensor4::contiguous(x, [b, s, h, d]);
//! let out = rt.forward(&stream, &t(&q), &t(&k), &t(&v), &AttnParams::causal())?;
//! let o: Vec<_> = stream.clone_dtoh(&out.o)?; // [b, s, h, d]; out.lse: [b, h, s]
//! # let _ = o;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod attention;
mod backward;
mod bwd_scratch;
mod embedded;
pub mod error;
mod forward;
mod fwd_arch;
mod fwd_sm90;
mod fwd_sm90_shape;
mod jit;
mod kvcache;
mod limits;
mod outputs;
mod paged;
mod params;
mod probe;
mod probe_sm90;
pub mod reference;
#[doc(hidden)]
pub mod rng;
pub mod tensor;
pub mod tensor_map;
#[doc(hidden)]
pub mod validate;
mod varlen;

pub use attention::{FlashAttention, driver_present};
pub use backward::{BwdInputs, GradsMut};
pub use bwd_scratch::BwdScratch;
pub use embedded::{EmbeddedKernel, EmbeddedSm90aKernel};
pub use error::{FlashError, Result};
pub use fwd_arch::ForwardArch;
#[doc(hidden)]
pub use fwd_sm90_shape::Sm90FwdShape;
pub use outputs::{Forward, Gradients};
pub use paged::PagedKv;
pub use params::{Alibi, AttnParams, BwdOptions, KvOptions, MAX_SPLITS, Mask};
#[doc(hidden)]
pub use probe_sm90::ProbeSm90At;
pub use tensor::{Element, IntoDeviceView, IntoDeviceViewMut, Tensor4, Tensor4Mut, bhsd_layout};
#[doc(hidden)]
pub use validate::{
    BwdPlan, FwdPlan, KvPlan, LaunchPlan, ParamValue, plan_bwd, plan_bwd_on, plan_bwd_with,
    plan_fwd, plan_fwd_on, plan_kvcache,
};
pub use varlen::Varlen;

/// The cudarc version this crate is built against, re-exported so users name the same types.
pub use cudarc;
/// The code generator (specs, ABI tables, PTX).
pub use flash_codegen;
/// The `half` crate whose `f16` and `bf16` the kernels take.
pub use half;
