//! The one error type of the runtime: every check on user input ends here, with a message
//! that says what was wrong and what to do about it.

use cudarc::driver::DriverError;
use flash_codegen::{DType, KernelSpec};

/// Result alias used across the runtime.
pub type Result<T, E = FlashError> = std::result::Result<T, E>;

/// Everything that can go wrong between a user's tensors and a finished kernel launch.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    /// Tensor shapes disagree with each other or with the memory behind them.
    #[error("shape mismatch: {0}")]
    ShapeMismatch(String),

    /// A stride the kernels cannot take: last dim not contiguous, a row/head stride that
    /// does not fit in u32, or output strides that make two elements share memory.
    #[error("bad strides for `{tensor}`: {why}")]
    StrideMismatch {
        /// Which tensor (`q`, `k`, `v`, `o`).
        tensor: &'static str,
        /// What is wrong and how to fix it.
        why: String,
    },

    /// A head dimension no kernel can run.
    #[error(
        "unsupported head dim {head_dim}: flash-ptx runs head dims that are multiples of 8 \
         from 8 to 256 (kernels exist for 32, 64, 96, 128, 160, 192, 224 and 256; other \
         multiples of 8 run on the next kernel up); pad the head dim to a multiple of 8"
    )]
    UnsupportedHeadDim {
        /// The problem's head dim.
        head_dim: usize,
    },

    /// Query heads are not a multiple of key/value heads (MQA/GQA need `heads % heads_k == 0`).
    #[error(
        "heads ({heads}) must be a non-zero multiple of heads_k ({heads_k}): each group of \
         heads / heads_k query heads shares one k/v head (MHA: equal, MQA: heads_k = 1)"
    )]
    HeadsNotDivisible {
        /// Query heads.
        heads: usize,
        /// Key/value heads.
        heads_k: usize,
    },

    /// A tensor's element type differs from q's.
    #[error(
        "dtype mismatch: `{tensor}` is {} but q is {}; q, k, v and o must share one dtype",
        found.name(),
        expected.name()
    )]
    DTypeMismatch {
        /// Which tensor.
        tensor: &'static str,
        /// q's dtype.
        expected: DType,
        /// This tensor's dtype.
        found: DType,
    },

    /// A pointer or stride breaks the kernels' 16-byte vector loads.
    #[error(
        "misaligned `{tensor}`: {why} (the kernels load 16-byte vectors: base pointers must be \
         16-byte aligned and row/head/batch strides multiples of 8 elements; copy the tensor \
         into a fresh allocation or pad its strides)"
    )]
    Misaligned {
        /// Which tensor.
        tensor: &'static str,
        /// The offending pointer or stride.
        why: String,
    },

    /// The GPU is older than the kernels' minimum compute capability.
    #[error(
        "GPU `{name}` has compute capability {major}.{minor}; flash-ptx kernels need 8.0 or \
         newer (A100, RTX 30xx/40xx, L4/L40, H100/H200, ...)"
    )]
    UnsupportedGpu {
        /// The device name the driver reports.
        name: String,
        /// Compute capability major.
        major: i32,
        /// Compute capability minor.
        minor: i32,
    },

    /// The kernel needs more shared memory per block than this GPU allows.
    #[error(
        "kernel `{kernel}` needs {needed} bytes of shared memory per block but this GPU allows \
         at most {limit} (opt-in limit); use a smaller head dim"
    )]
    SharedMemoryLimit {
        /// Kernel name.
        kernel: String,
        /// Bytes the kernel needs (static + dynamic).
        needed: u64,
        /// The device's opt-in limit per block.
        limit: u64,
    },

    /// The launch grid exceeds the hardware limits (x < 2^31, y and z <= 65535).
    #[error(
        "launch grid {grid:?} is too large: {why} (grid = [ceil(seqlen_q / block_m), heads, \
         batch]; for the KV-cache forward [ceil(seqlen_q * heads / heads_k / block_m), \
         heads_k, batch * num_splits]; split the batch or the heads into several calls)"
    )]
    GridTooLarge {
        /// The grid that would be launched.
        grid: [u64; 3],
        /// Which limit is exceeded.
        why: String,
    },

    /// A backward scratch buffer is smaller than the call needs (or missing).
    #[error(
        "backward scratch `{buffer}` holds {available} f32 values but this call needs {needed}: \
         make the scratch with `BwdScratch::new` for this q shape and mode (atomic mode, \
         `deterministic: false`, needs a dq_accum buffer), or pass `None` to allocate per call"
    )]
    ScratchTooSmall {
        /// `dvec` or `dq_accum`.
        buffer: &'static str,
        /// f32 elements the call needs.
        needed: usize,
        /// f32 elements the buffer holds (0 when missing).
        available: usize,
    },

    /// A parameter value the kernels cannot use (e.g. a non-finite softmax scale).
    #[error("invalid parameter: {0}")]
    InvalidParam(String),

    /// A TMA tensor map cannot describe this tensor (sm_90a kernels; the sm_80 ones take
    /// any tensor the other checks accept).
    #[error(
        "tensor map: {0} (TMA needs 16-byte aligned base pointers, strides that are non-zero \
         multiples of 16 bytes, and boxes of at most 256 elements a side)"
    )]
    TensorMap(String),

    /// A forward forced onto one kernel family ([`crate::ForwardArch::Sm90a`]) that cannot
    /// run the call; [`crate::ForwardArch::Auto`] runs one that can.
    #[error(
        "{arch} cannot run this call: {why} (ForwardArch::Auto runs the sm_80 forward where \
         the sm_90a one cannot)"
    )]
    ArchUnavailable {
        /// The forced choice (`ForwardArch::Sm90a`).
        arch: &'static str,
        /// What refused, and what the kernel takes.
        why: String,
    },

    /// A tensor or stream belongs to another CUDA context than this runtime.
    #[error(
        "`{what}` belongs to a different CUDA context than this FlashAttention instance; \
         create one FlashAttention per device/context"
    )]
    WrongContext {
        /// Which argument.
        what: &'static str,
    },

    /// The CUDA driver library (libcuda) could not be found.
    #[error(
        "the NVIDIA driver library (libcuda.so / nvcuda.dll) was not found: install the NVIDIA \
         driver, or add its folder to LD_LIBRARY_PATH (inside containers, run with the NVIDIA \
         container runtime)"
    )]
    NoDriver,

    /// The driver rejected a PTX module; `log` is the JIT compiler's error log.
    #[error("the CUDA driver rejected the PTX of `{kernel}`:\n{log}")]
    Jit {
        /// Kernel (or entry) name.
        kernel: String,
        /// The driver's JIT error log (or a description when the log is empty).
        log: String,
    },

    /// A runtime made from embedded kernels only ([`crate::FlashAttention::with_kernels`],
    /// e.g. a `flash_kernel!` module's) was asked for a variant it does not embed.
    #[error(
        "kernel `{}` is not embedded: this runtime runs only the kernels given to it (e.g. by \
         a `flash_kernel!` module) and generates none at run time; {}",
        spec.name(),
        crate::embedded::missing_kernel_hint(spec)
    )]
    KernelNotEmbedded {
        /// The variant the call needs.
        spec: KernelSpec,
    },

    /// A runtime that does not generate code ([`crate::FlashAttention::with_kernels`]) was
    /// asked to launch an sm_90a forward whose PTX is not registered
    /// ([`crate::FlashAttention::register_sm90a_kernels`]). `forward` never asks for one
    /// (it runs the sm_80 forward instead); `launch_fwd_sm90` can.
    #[error(
        "sm_90a kernel `{}` is not embedded: this runtime runs only the kernels given to it \
         (e.g. by a `flash_kernel!` module) and generates none at run time; {}",
        variant.name(),
        crate::embedded::missing_sm90a_hint(variant)
    )]
    Sm90aKernelNotEmbedded {
        /// The sm_90a forward variant the call needs.
        variant: flash_codegen::kernels::sm90::fwd::Variant,
    },

    /// The runtime and the code generator disagree on a kernel ABI: a flash-ptx bug.
    #[error("internal error (please report): {0}")]
    Internal(String),

    /// Any other CUDA driver error.
    #[error("CUDA driver error: {0}")]
    Driver(#[from] DriverError),
}
