//! [`FlashAttention`]: per-context module cache and the checked kernel launches.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
    ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use flash_codegen::{Arch, KernelSpec, Mask, Tiling};

use crate::embedded::{EmbeddedKernel, ptx_source};
use crate::error::{FlashError, Result};
use crate::validate::{LaunchPlan, ParamValue};

/// The NVIDIA driver library's file names, in the order they are tried.
pub(crate) const DRIVER_LIBRARIES: &[&str] = if cfg!(windows) {
    &["nvcuda.dll"]
} else {
    &["libcuda.so.1", "libcuda.so"]
};

/// True when the NVIDIA driver library can be loaded. cudarc panics on the first driver
/// call without it, so this is checked before any.
pub fn driver_present() -> bool {
    // Whatever linking mode cudarc was built with (its `is_culib_present` exists only under
    // dynamic-loading; under dynamic-linking the process has libcuda mapped already).
    // SAFETY: opening the driver library runs only its own initialisers (what cudarc's
    // first call would run anyway); no driver function is called and no symbol is used.
    DRIVER_LIBRARIES
        .iter()
        .any(|name| unsafe { libloading::Library::new(*name) }.is_ok())
}

/// A zeroed device buffer of `n` elements (at least 1: the driver allocates no empty
/// buffer), on `stream`.
pub(crate) fn alloc<T: ValidAsZeroBits + cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    n: usize,
) -> Result<CudaSlice<T>> {
    if n == usize::MAX {
        return Err(FlashError::ShapeMismatch(
            "the output would hold more elements than any device has".into(),
        ));
    }
    Ok(stream.alloc_zeros::<T>(n.max(1))?)
}

pub(crate) use crate::validate::prod as prod_of; // saturating: the checks report it too large

/// A loaded kernel: the module (kept alive) and its entry point.
type Loaded = (Arc<CudaModule>, CudaFunction);

/// FlashAttention-2 on one CUDA context: generates (or takes registered) PTX per kernel
/// variant on first use, JIT-loads it, caches it, and launches it after checking every
/// argument. Cheap to share between threads (`Send + Sync`).
///
/// [`FlashAttention::with_kernels`] makes one that never generates code: it runs only the
/// kernels embedded at compile time (by `flash_kernel!`) and fails with
/// [`FlashError::KernelNotEmbedded`] for any other variant.
pub struct FlashAttention {
    ctx: Arc<CudaContext>,
    pub(crate) arch: Arch,
    pub(crate) smem_optin: u64,
    /// The compute capability calls are planned for (the GPU's, or less after
    /// [`FlashAttention::limit_compute_capability`]).
    pub(crate) cc: (u32, u32),
    /// Streaming multiprocessors of the device (the KV-cache forward's split rule).
    pub(crate) sms: u32,
    /// Shared memory per SM (the device's, or less after
    /// [`FlashAttention::limit_smem_per_sm`]) and the device's own.
    pub(crate) smem_per_sm: (u64, u64),
    /// Generate the PTX of variants that have none registered (off for embedded-only).
    generate: bool,
    /// Which forward `forward_into` runs ([`FlashAttention::set_forward_arch`]).
    pub(crate) fwd_arch: crate::ForwardArch,
    modules: Mutex<BTreeMap<KernelSpec, Loaded>>,
    registered: Mutex<BTreeMap<KernelSpec, &'static str>>,
    /// Registered sm_90a forward PTX by entry name (`embedded::EmbeddedSm90aKernel`).
    pub(crate) registered_sm90a: Mutex<BTreeMap<String, &'static str>>,
    entries: Mutex<BTreeMap<String, CudaFunction>>,
    /// The split-KV forward's partial buffers, one per stream (keyed by the `CUstream`; the
    /// slice holds its stream, so the key cannot be reused while it is cached), kept
    /// between calls so that a decode step allocates nothing.
    pub(crate) kv_scratch: Mutex<BTreeMap<usize, CudaSlice<f32>>>,
    /// The sm_90a dynamic scheduler's claim counters (zeroed `u32[2]`, left zeroed by
    /// every launch), one per stream, keyed and held like `kv_scratch`.
    pub(crate) tile_counters: Mutex<BTreeMap<usize, CudaSlice<u32>>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `stream` is capturing a graph: a buffer the runtime keeps per stream must not
/// go into one (the graph may be replayed on another stream while this one uses it), so
/// a captured call gets buffers of its own, freed in stream order.
pub(crate) fn capturing(stream: &CudaStream) -> Result<bool> {
    use cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    Ok(stream.capture_status()? != CU_STREAM_CAPTURE_STATUS_NONE)
}

impl FlashAttention {
    /// A runtime on device `ordinal`'s primary context. Returns [`FlashError::NoDriver`]
    /// (instead of panicking) when libcuda is missing.
    pub fn on_device(ordinal: usize) -> Result<Self> {
        if !driver_present() {
            return Err(FlashError::NoDriver);
        }
        Self::new(CudaContext::new(ordinal)?)
    }

    /// A runtime on `ctx`. Checks that the driver is present and that the GPU has compute
    /// capability 8.0 or newer.
    pub fn new(ctx: Arc<CudaContext>) -> Result<Self> {
        if !driver_present() {
            return Err(FlashError::NoDriver);
        }
        let arch = Arch::Sm80;
        let (major, minor) = ctx.compute_capability()?;
        let (min_major, min_minor) = arch.min_compute_capability();
        if (major as i64, minor as i64) < (min_major as i64, min_minor as i64) {
            return Err(FlashError::UnsupportedGpu {
                name: ctx.name().unwrap_or_else(|_| "unknown".into()),
                major,
                minor,
            });
        }
        let optin = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let sms = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let per_sm = ctx
            .attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            )?
            .max(0) as u64;
        Ok(FlashAttention {
            ctx,
            arch,
            smem_optin: optin.max(0) as u64,
            cc: (major.max(0) as u32, minor.max(0) as u32),
            sms: sms.max(1) as u32,
            smem_per_sm: (per_sm, per_sm),
            generate: true,
            fwd_arch: crate::ForwardArch::Auto,
            modules: Mutex::new(BTreeMap::new()),
            registered: Mutex::new(BTreeMap::new()),
            registered_sm90a: Mutex::new(BTreeMap::new()),
            entries: Mutex::new(BTreeMap::new()),
            kv_scratch: Mutex::new(BTreeMap::new()),
            tile_counters: Mutex::new(BTreeMap::new()),
        })
    }

    /// A runtime on `ctx` that runs only `kernels` (e.g. a `flash_kernel!` module's
    /// `KERNELS`) and never generates code: a call that needs another variant fails with
    /// [`FlashError::KernelNotEmbedded`], which says what to add to the invocation. Add
    /// sm_90a forwards with [`FlashAttention::register_sm90a_kernels`] (a module's
    /// `runtime` does both).
    pub fn with_kernels(ctx: Arc<CudaContext>, kernels: &[EmbeddedKernel]) -> Result<Self> {
        let mut rt = Self::new(ctx)?;
        rt.generate = false;
        rt.register_kernels(kernels);
        Ok(rt)
    }

    /// [`FlashAttention::with_kernels`] on device `ordinal`'s primary context.
    pub fn on_device_with_kernels(ordinal: usize, kernels: &[EmbeddedKernel]) -> Result<Self> {
        if !driver_present() {
            return Err(FlashError::NoDriver);
        }
        Self::with_kernels(CudaContext::new(ordinal)?, kernels)
    }

    /// Whether variants without registered PTX are generated on first use (true unless
    /// made by [`FlashAttention::with_kernels`]).
    pub fn generates_on_demand(&self) -> bool {
        self.generate
    }

    /// [`FlashAttention::register_ptx`] for each kernel: use the embedded PTX of these
    /// variants instead of generating it (variants already loaded keep their module).
    pub fn register_kernels(&self, kernels: &[EmbeddedKernel]) {
        let mut registered = lock(&self.registered);
        for k in kernels {
            registered.insert(k.spec(), k.ptx());
        }
    }

    /// The context this runtime launches on.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Use `ptx` (e.g. embedded at compile time by `flash_kernel!`) for `spec` instead of
    /// generating it. Takes effect if the spec has not been loaded yet; returns whether it will.
    pub fn register_ptx(&self, spec: KernelSpec, ptx: &'static str) -> bool {
        lock(&self.registered).insert(spec, ptx);
        !lock(&self.modules).contains_key(&spec)
    }

    /// Whether `spec`'s PTX is at hand: loaded, registered, or generated on demand.
    pub fn has_ptx(&self, spec: &KernelSpec) -> bool {
        self.generate
            || lock(&self.registered).contains_key(spec)
            || lock(&self.modules).contains_key(spec)
    }

    /// The specs loaded so far, in order.
    pub fn loaded_specs(&self) -> Vec<KernelSpec> {
        lock(&self.modules).keys().copied().collect()
    }

    /// The entry point of `spec`, loading (and caching) its module on first use: from its
    /// registered PTX, else generated (or [`FlashError::KernelNotEmbedded`] when this
    /// runtime does not generate).
    pub fn function(&self, spec: &KernelSpec) -> Result<CudaFunction> {
        if !spec.is_supported() {
            if spec.tiling != Tiling::Standard {
                let with: Vec<String> = KernelSpec::all()
                    .into_iter()
                    .filter(|s| {
                        s.tiling == spec.tiling && s.dtype == spec.dtype && s.mask == Mask::None
                    })
                    .map(|s| s.name())
                    .collect();
                return Err(FlashError::InvalidParam(format!(
                    "{spec} has no kernel: its pass and head dim have no {:?} tiling (those \
                     that do: {}; KernelSpec::tilings)",
                    spec.tiling,
                    with.join(", ")
                )));
            }
            return Err(FlashError::UnsupportedHeadDim {
                head_dim: spec.head_dim as usize,
            });
        }
        let mut modules = lock(&self.modules);
        if let Some((_, f)) = modules.get(spec) {
            return Ok(f.clone());
        }
        let registered = lock(&self.registered).get(spec).copied();
        let ptx = ptx_source(spec, registered, self.generate)?;
        let loaded = self.load(&spec.name(), &ptx, spec.smem_bytes())?;
        let f = loaded.1.clone();
        modules.insert(*spec, loaded);
        Ok(f)
    }

    /// Load entry `name` from `ptx` (cached by name: the first PTX given for a name wins),
    /// allowing `dynamic_smem_bytes` of dynamic shared memory. For hand-written or probe kernels.
    pub fn load_entry(
        &self,
        name: &str,
        ptx: &str,
        dynamic_smem_bytes: u32,
    ) -> Result<CudaFunction> {
        self.load_entry_with(name, dynamic_smem_bytes, || ptx.to_string())
    }

    /// [`FlashAttention::load_entry`] with the PTX made by `ptx` only when `name` is not
    /// loaded yet (generated kernels: no printing on every launch).
    pub(crate) fn load_entry_with(
        &self,
        name: &str,
        dynamic_smem_bytes: u32,
        ptx: impl FnOnce() -> String,
    ) -> Result<CudaFunction> {
        let mut entries = lock(&self.entries);
        if let Some(f) = entries.get(name) {
            return Ok(f.clone());
        }
        let (_, f) = self.load(name, &ptx(), dynamic_smem_bytes)?;
        entries.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// JIT-load one entry, fetch the JIT log on failure, and raise its dynamic shared
    /// memory limit once (the attribute is per function).
    fn load(&self, name: &str, ptx: &str, smem: u32) -> Result<Loaded> {
        if ptx.contains('\0') {
            return Err(FlashError::Jit {
                kernel: name.to_string(),
                log: "the PTX text contains a NUL byte".into(),
            });
        }
        self.ctx.bind_to_thread()?;
        let module = match self.ctx.load_module(Ptx::from_src(ptx)) {
            Ok(m) => m,
            Err(e) => {
                let log = crate::jit::error_log(ptx);
                let log = if log.trim().is_empty() {
                    format!("{e} (the driver gave no JIT log)")
                } else {
                    format!("{e}\n{log}")
                };
                return Err(FlashError::Jit {
                    kernel: name.to_string(),
                    log,
                });
            }
        };
        let f = module.load_function(name).map_err(|e| FlashError::Jit {
            kernel: name.to_string(),
            log: format!("the module loaded but has no entry `{name}`: {e}"),
        })?;
        let static_smem = f.shared_size_bytes()?.max(0) as u64;
        let needed = static_smem + smem as u64;
        if needed > self.smem_optin {
            return Err(FlashError::SharedMemoryLimit {
                kernel: name.to_string(),
                needed,
                limit: self.smem_optin,
            });
        }
        if smem > 0 {
            let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            f.set_attribute(attr, smem as i32)?;
        }
        let (limit, device) = self.smem_per_sm;
        if limit < device {
            let percent = (limit * 100 / device.max(1)) as i32; // (< 100)
            let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
            f.set_attribute(attr, percent)?;
        }
        Ok((module, f))
    }

    pub(crate) fn check_ctx(&self, what: &'static str, ctx: &Arc<CudaContext>) -> Result<()> {
        if ctx.cu_ctx() == self.ctx.cu_ctx() {
            Ok(())
        } else {
            Err(FlashError::WrongContext { what })
        }
    }

    /// Enqueue `plan` (grid, block, smem and parameters in ABI order) on `stream`.
    ///
    /// # Safety
    /// `f` must be `plan.spec`'s entry and `plan` must come from `plan_fwd` / `plan_bwd` /
    /// `plan_kvcache` (its scratch bound) for pointers into live device buffers of this
    /// context that stay alive and unaliased by other writers until the launch has run (the
    /// callers hold cudarc's guards for that).
    /// Grid, block and smem are then within device limits: the grid was checked in
    /// planning and the dynamic smem limit raised when `f` was loaded.
    pub(crate) unsafe fn launch_unchecked(
        &self,
        stream: &CudaStream,
        f: &CudaFunction,
        plan: &LaunchPlan,
    ) -> Result<()> {
        let mut b = stream.launch_builder(f);
        for (_, p) in &plan.params {
            match p {
                ParamValue::U64(x) => b.arg(x),
                ParamValue::U32(x) => b.arg(x),
                ParamValue::F32(x) => b.arg(x),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (plan.grid[0], plan.grid[1], plan.grid[2]),
            block_dim: (plan.block[0], plan.block[1], plan.block[2]),
            shared_mem_bytes: plan.smem_bytes,
        };
        // SAFETY: the caller's contract (see `# Safety`); the argument values live in
        // `plan` until `launch` returns, and the parameter widths match the entry's.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn runtime_is_shareable_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<super::FlashAttention>();
    }
}
