//! The first Hopper forward's launch (`flash_codegen::kernels::sm90::fwd`, issue 22): not
//! yet behind `forward` (no spec key, no selection); tests and benches call it directly
//! on contiguous `[b, s, h, d]` tensors to check and time it against the sm80 path.

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use flash_codegen::kernels::sm90::fwd;

use crate::attention::FlashAttention;
use crate::error::{FlashError, Result};
use crate::tensor::Element;
use crate::tensor_map::{TensorMap, TensorMapLayout};

/// The problem of [`FlashAttention::launch_fwd_sm90`]: q, o `[batch, seqlen_q, heads,
/// head_dim]`, k, v `[batch, seqlen_k, heads_k, head_dim]`, all contiguous.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Sm90FwdShape {
    /// Batch.
    pub batch: usize,
    /// Query positions.
    pub seqlen_q: usize,
    /// Key positions (at least 1).
    pub seqlen_k: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (dividing `heads`).
    pub heads_k: usize,
    /// 64 or 128.
    pub head_dim: usize,
    /// Causal mask, bottom-right aligned (query i sees keys up to i + seqlen_k - seqlen_q).
    pub causal: bool,
    /// FA3's intra-warpgroup overlap (`fwd::Variant::overlap`).
    pub overlap: bool,
    /// The consumers take turns to issue their products (`fwd::Variant::pingpong`).
    pub pingpong: bool,
    /// Consumer warpgroups (64 query rows each): 2, or 3 at d64; `None`: the kernel's
    /// default (`fwd::Variant::default_consumers`).
    pub consumers: Option<u32>,
    /// The debug build: mbarrier waits bounded, failing with the barrier's name.
    pub debug: bool,
}

impl FlashAttention {
    /// Runs the sm_90a forward: `o` = softmax(q k^T / sqrt(d)) v, `lse` (`[b, h, sq]`) when
    /// given.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn launch_fwd_sm90<T: Element>(
        &self,
        stream: &CudaStream,
        sh: Sm90FwdShape,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        o: &mut CudaSlice<T>,
        lse: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        self.check_ctx("stream", stream.context())?;
        if self.compute_capability() != (9, 0) {
            return Err(FlashError::InvalidParam(format!(
                "the sm_90a forward needs compute capability 9.0, this GPU has {:?}",
                self.compute_capability()
            )));
        }
        let (b, sq, sk, h, hk, d) = (
            sh.batch,
            sh.seqlen_q,
            sh.seqlen_k,
            sh.heads,
            sh.heads_k,
            sh.head_dim,
        );
        if !fwd::HEAD_DIMS.contains(&(d as u32)) {
            return Err(FlashError::UnsupportedHeadDim { head_dim: d });
        }
        if hk == 0 || h % hk != 0 {
            return Err(FlashError::HeadsNotDivisible {
                heads: h,
                heads_k: hk,
            });
        }
        // TMA coordinates and the kernel's block arithmetic are signed 32-bit
        if sq.max(sk) >= (1 << 31) - 256 {
            return Err(FlashError::ShapeMismatch(format!(
                "{sh:?}: sequence lengths must stay below 2^31 - 256"
            )));
        }
        if sk == 0 {
            return Err(FlashError::ShapeMismatch(
                "the sm_90a forward needs at least one key".into(),
            ));
        }
        let (nq, nk) = (b * sq * h * d, b * sk * hk * d);
        let lse_len = lse.as_ref().map_or(b * h * sq, |l| l.len());
        let lens = [q.len(), k.len(), v.len(), o.len()];
        if lens[0] < nq || lens[1] < nk || lens[2] < nk || lens[3] < nq || lse_len < b * h * sq {
            return Err(FlashError::ShapeMismatch(format!(
                "{sh:?}: q, k, v, o hold {lens:?} elements, need {nq}, {nk}, {nk}, {nq}; lse \
                 {lse_len}, needs {}",
                b * h * sq
            )));
        }
        if b == 0 || sq == 0 || h == 0 {
            return Ok(());
        }
        let var = Self::fwd_sm90_variant(T::DTYPE, sh)?;
        let q_map = TensorMapLayout::bhsd(
            T::DTYPE,
            [b, sq, h, d],
            [sq * h * d, h * d, d],
            var.block_m(),
            64,
        );
        let kv_map = TensorMapLayout::bhsd(
            T::DTYPE,
            [b, sk, hk, d],
            [sk * hk * d, hk * d, d],
            fwd::BLOCK_N,
            64,
        );
        let f = self.fwd_sm90_function(var)?;
        let (qp, _q) = q.device_ptr(stream);
        let (kp, _k) = k.device_ptr(stream);
        let (vp, _v) = v.device_ptr(stream);
        let maps = [
            TensorMap::encode(&q_map, qp)?,
            TensorMap::encode(&kv_map, kp)?,
            TensorMap::encode(&kv_map, vp)?,
        ];
        let (op, _o) = o.device_ptr_mut(stream);
        let (lp, _l) = match lse {
            Some(l) => {
                let (p, g) = l.device_ptr_mut(stream);
                (p, Some(g))
            }
            None => (0, None),
        };
        let u = |x: usize| -> Result<u32> {
            u32::try_from(x)
                .map_err(|_| FlashError::ShapeMismatch(format!("{sh:?}: {x} is over 2^32")))
        };
        let (sq32, sk32, group, heads) = (u(sq)?, u(sk)?, u(h / hk)?, u(h)?);
        let (o_row, o_head, o_batch) = (u(h * d)?, u(d)?, (sq * h * d) as u64);
        let scale_log2 = std::f32::consts::LOG2_E / (d as f32).sqrt();
        let mut lb = stream.launch_builder(&f);
        for m in &maps {
            lb.arg(m);
        }
        lb.arg(&op).arg(&lp);
        lb.arg(&sq32).arg(&sk32).arg(&group).arg(&heads);
        lb.arg(&o_row).arg(&o_head).arg(&o_batch).arg(&scale_log2);
        let cfg = LaunchConfig {
            grid_dim: (u(sq.div_ceil(var.block_m() as usize))?, heads, u(b)?),
            block_dim: (var.threads(), 1, 1),
            shared_mem_bytes: var.smem_bytes(),
        };
        // SAFETY: the parameters are the kernel's (three tensor maps, then
        // `fwd::SCALARS`) in order and width; the maps describe q, k, v as checked above
        // (TMA clips every box at the tensors' ends), o and lse hold the elements the
        // kernel writes (rows below seqlen_q of each head and batch); the guards keep
        // every buffer borrowed until the launch is enqueued; the grid's y and z are the
        // heads and batch, within the driver's limits for any u32 heads below 65536
        // (checked by the driver: an error, not undefined behaviour).
        unsafe { lb.launch(cfg) }?;
        Ok(())
    }

    /// The variant `sh` asks for (head dim checked by the caller).
    fn fwd_sm90_variant(dtype: flash_codegen::DType, sh: Sm90FwdShape) -> Result<fwd::Variant> {
        let head_dim = sh.head_dim as u32;
        let consumers = sh
            .consumers
            .unwrap_or_else(|| fwd::Variant::default_consumers(head_dim));
        if !(consumers == 2 || (consumers == 3 && head_dim == 64)) {
            return Err(FlashError::InvalidParam(format!(
                "{sh:?}: the sm_90a forward runs 2 consumer warpgroups, or 3 at head dim 64"
            )));
        }
        Ok(fwd::Variant {
            dtype,
            head_dim,
            causal: sh.causal,
            overlap: sh.overlap,
            pingpong: sh.pingpong,
            consumers,
            debug: sh.debug,
        })
    }

    fn fwd_sm90_function(&self, var: fwd::Variant) -> Result<CudaFunction> {
        self.load_entry_with(&var.name(), var.smem_bytes(), || {
            flash_codegen::ptx::print::module(&fwd::module(var))
        })
    }
}
