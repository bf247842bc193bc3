//! The mma probe's launch (`flash_codegen::kernels::sm80::probe`): one warp checks the
//! fragment layouts of `mma.sync` against the host's expectations (tests/gpu_probe.rs).

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use flash_codegen::DType;
use flash_codegen::kernels::sm80::probe;

use crate::attention::FlashAttention;
use crate::error::{FlashError, Result};
use crate::tensor::Element;

impl FlashAttention {
    /// Run the mma probe (`flash_codegen::kernels::sm80::probe`): `c1 = a @ bt^T`, `c2 = a @ v`,
    /// with a, bt, v 16x16 row-major `T` and c1, c2 16x16 row-major f32.
    #[doc(hidden)]
    pub fn launch_probe<T: Element>(
        &self,
        stream: &CudaStream,
        a: &CudaSlice<T>,
        bt: &CudaSlice<T>,
        v: &CudaSlice<T>,
        c1: &mut CudaSlice<f32>,
        c2: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.check_ctx("stream", stream.context())?;
        for (name, len) in [("a", a.len()), ("bt", bt.len()), ("v", v.len())] {
            if len < 256 {
                return Err(FlashError::ShapeMismatch(format!(
                    "probe input `{name}` needs 256 elements (16x16), has {len}"
                )));
            }
        }
        for (name, len) in [("c1", c1.len()), ("c2", c2.len())] {
            if len < 256 {
                return Err(FlashError::ShapeMismatch(format!(
                    "probe output `{name}` needs 256 f32 (16x16), has {len}"
                )));
            }
        }
        let f = self.probe_function(T::DTYPE)?;
        let mut b = stream.launch_builder(&f);
        b.arg(a).arg(bt).arg(v).arg(c1).arg(c2);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: probe::SMEM_BYTES,
        };
        // SAFETY: the probe's params are five u64 pointers (probe::PARAMS), passed as five
        // cudarc slices of this context holding at least 256 elements each (checked above),
        // which is all the probe reads or writes; cudarc allocations are 256-byte aligned,
        // as cp.async needs; the slices are borrowed for the whole call.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    fn probe_function(&self, dtype: DType) -> Result<CudaFunction> {
        self.load_entry_with(&probe::entry_name(dtype), probe::SMEM_BYTES, || {
            flash_codegen::ptx::print::module(&probe::module(dtype))
        })
    }
}
