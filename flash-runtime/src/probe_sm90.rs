//! The Hopper probe's launch (`flash_codegen::kernels::sm90::probe`): one warpgroup checks
//! TMA loads and stores through 4D tensor maps, mbarrier phases, `wgmma` in both operand
//! forms with the descriptors of `tile::desc`, and `stmatrix`, against host references
//! (tests/gpu_probe_sm90.rs).

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use flash_codegen::DType;
use flash_codegen::kernels::sm90::probe;

use crate::attention::FlashAttention;
use crate::error::{FlashError, Result};
use crate::tensor::Element;
use crate::tensor_map::{TensorMap, TensorMapLayout};

/// Where the probe reads and writes: boxes of 64 positions of head `h`, batch `b`.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct ProbeSm90At {
    /// Head of every box.
    pub h: u32,
    /// Batch of every box.
    pub b: u32,
    /// First position of the Q box (and of the O box stored).
    pub sq0: u32,
    /// First position of the K and V boxes.
    pub sk0: u32,
    /// First position of the second-phase Q box.
    pub s1: u32,
}

impl FlashAttention {
    /// Runs the Hopper probe on `[b, s, h, 64]` contiguous tensors `q`, `k`, `v` and `o`:
    /// `s_out` (f32 `[64][64]`) gets `S = Q K^T` of the boxes, `o` the box `P V` at Q's
    /// place, `img` (8192 bytes) the swizzled shared-memory image of the second Q box.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn launch_probe_sm90<T: Element>(
        &self,
        stream: &CudaStream,
        shape: [usize; 4],
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        o: &mut CudaSlice<T>,
        s_out: &mut CudaSlice<f32>,
        img: &mut CudaSlice<u8>,
        at: ProbeSm90At,
    ) -> Result<()> {
        self.check_ctx("stream", stream.context())?;
        if self.compute_capability() != (9, 0) {
            return Err(FlashError::InvalidParam(format!(
                "the sm_90a probe needs compute capability 9.0, this GPU has {:?}",
                self.compute_capability()
            )));
        }
        let [b, s, h, d] = shape;
        let n = b * s * h * d;
        let inside = (at.h as usize) < h
            && (at.b as usize) < b
            && [at.sq0, at.sk0, at.s1].iter().all(|&x| (x as usize) < s);
        if d != 64 || !inside {
            return Err(FlashError::ShapeMismatch(format!(
                "probe: shape {shape:?} (d must be 64) and boxes at {at:?} (inside it)"
            )));
        }
        let lens = [q.len(), k.len(), v.len(), o.len()];
        if lens.iter().any(|&l| l < n) || s_out.len() < 4096 || img.len() < 8192 {
            return Err(FlashError::ShapeMismatch(format!(
                "probe buffers: q k v o {lens:?} need {n} elements, s_out {} needs 4096, img {} needs 8192",
                s_out.len(),
                img.len()
            )));
        }
        let layout = TensorMapLayout::bhsd(T::DTYPE, shape, [s * h * d, h * d, d], 64, 64);
        let f = self.probe_sm90_function(T::DTYPE)?;
        let (qp, _q) = q.device_ptr(stream);
        let (kp, _k) = k.device_ptr(stream);
        let (vp, _v) = v.device_ptr(stream);
        let (op, _o) = o.device_ptr_mut(stream);
        let maps = [qp, kp, vp, op]
            .map(|p| TensorMap::encode(&layout, p))
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let (sp, _s) = s_out.device_ptr_mut(stream);
        let (ip, _i) = img.device_ptr_mut(stream);
        let mut lb = stream.launch_builder(&f);
        for m in &maps {
            lb.arg(m);
        }
        lb.arg(&sp).arg(&ip);
        lb.arg(&at.h)
            .arg(&at.b)
            .arg(&at.sq0)
            .arg(&at.sk0)
            .arg(&at.s1);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (probe::THREADS, 1, 1),
            shared_mem_bytes: probe::SMEM_BYTES,
        };
        // SAFETY: the parameters are the probe's (four tensor maps, then `probe::SCALARS`)
        // in order and width; the maps describe the four `[b, s, h, 64]` buffers checked
        // above (every box lies inside the tensor or is clipped by TMA), s_out holds 4096
        // f32 and img 8192 bytes, all the probe writes; the guards keep every buffer
        // borrowed until the launch is enqueued.
        unsafe { lb.launch(cfg) }?;
        Ok(())
    }

    fn probe_sm90_function(&self, dtype: DType) -> Result<CudaFunction> {
        self.load_entry_with(&probe::entry_name(dtype), probe::SMEM_BYTES, || {
            flash_codegen::ptx::print::module(&probe::module(dtype))
        })
    }
}
