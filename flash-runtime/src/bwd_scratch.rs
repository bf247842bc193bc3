//! [`BwdScratch`]: the backward's scratch buffers, which a caller may keep between calls.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, SyncOnDrop};

use crate::FlashAttention;
use crate::error::{FlashError, Result};
use crate::params::BwdOptions;
use crate::validate::{BufDesc, ScratchDesc, ScratchNeed, bwd_scratch_need};

/// Device scratch of the backward: D = rowsum(dO * O) (f32 `[batch, heads, seqlen_q]`),
/// for atomic mode the f32 dQ accumulator (whole 16-row tiles in the kernels' fragment
/// order) and, for grouped-query problems whose main pass splits each group over several
/// CTAs ([`BwdOptions::group_splits`]), their f32 partial dK and dV.
///
/// [`FlashAttention::backward`] allocates one per call when given `None`; a training loop
/// can make one for its largest shapes and pass it to every call instead
/// ([`BwdScratch::for_shapes`]; a scratch from [`BwdScratch::new`] has no room for the
/// partials, which a call that needs them then allocates for itself). A scratch made for
/// atomic mode also serves deterministic calls (which do not use the accumulator).
#[derive(Debug)]
pub struct BwdScratch {
    pub(crate) dvec: CudaSlice<f32>,
    pub(crate) dq_accum: Option<CudaSlice<f32>>,
    pub(crate) dkv_partial: Option<CudaSlice<f32>>,
}

impl BwdScratch {
    /// Scratch for calls whose q has shape `q_shape` (`[batch, seqlen_q, heads, head_dim]`,
    /// or anything needing less), allocated (zeroed) on `stream`.
    pub fn new(stream: &Arc<CudaStream>, q_shape: [usize; 4], deterministic: bool) -> Result<Self> {
        Self::with_need(stream, ScratchNeed::of(q_shape, deterministic))
    }

    /// Scratch for calls whose q has shape `q_shape` and k `k_shape` (`[batch, seqlen_k,
    /// heads_k, head_dim]`) on `rt`'s device, in `opts`' mode, with room for the partial dK
    /// and dV of the group split such calls run with: what [`FlashAttention::backward`]
    /// would allocate for them.
    pub fn for_shapes(
        rt: &FlashAttention,
        stream: &Arc<CudaStream>,
        (q_shape, k_shape): ([usize; 4], [usize; 4]),
        opts: &BwdOptions,
    ) -> Result<Self> {
        let need = rt.bwd_scratch_need(q_shape, k_shape, opts);
        Self::with_need(stream, need)
    }

    pub(crate) fn with_need(stream: &Arc<CudaStream>, need: ScratchNeed) -> Result<Self> {
        if need.bytes() > isize::MAX as usize {
            return Err(FlashError::ShapeMismatch(format!(
                "the backward scratch would need {need:?} f32 values, more than any device holds"
            )));
        }
        let optional = |n: usize| match n {
            0 => Ok(None),
            n => stream.alloc_zeros::<f32>(n).map(Some),
        };
        Ok(BwdScratch {
            dvec: stream.alloc_zeros::<f32>(need.dvec.max(1))?,
            dq_accum: optional(need.dq_accum)?,
            dkv_partial: optional(need.dkv_partial)?,
        })
    }

    /// Device bytes [`BwdScratch::new`] allocates for these arguments: `4 * b * h * sq`
    /// for D, plus `4 * b * h * 16 ceil(sq / 16) * d` for the accumulator unless
    /// `deterministic`.
    pub fn bytes(q_shape: [usize; 4], deterministic: bool) -> usize {
        ScratchNeed::of(q_shape, deterministic).bytes()
    }

    /// f32 elements held: `dvec`, `dq_accum` and `dkv_partial` (0 where absent).
    pub fn capacity(&self) -> ScratchNeed {
        ScratchNeed {
            dvec: self.dvec.len(),
            dq_accum: self.dq_accum.as_ref().map_or(0, |a| a.len()),
            dkv_partial: self.dkv_partial.as_ref().map_or(0, |a| a.len()),
        }
    }

    /// The buffers as the checks see them, and their guards (`stream` waits for their
    /// earlier uses; dropped after the launches, the guards record this call's).
    pub(crate) fn bind<'a>(&'a mut self, stream: &'a Arc<CudaStream>) -> (ScratchDesc, Guards<'a>) {
        let dvec_len = self.dvec.len();
        let (dvec_ptr, dvec_guard) = self.dvec.device_ptr_mut(stream);
        let (acc, acc_guard) = bind_optional(self.dq_accum.as_mut(), stream);
        let (partial, partial_guard) = bind_optional(self.dkv_partial.as_mut(), stream);
        let desc = ScratchDesc {
            dvec: BufDesc {
                ptr: dvec_ptr,
                len: dvec_len,
            },
            dq_accum: acc,
            dkv_partial: partial,
        };
        (desc, (dvec_guard, acc_guard, partial_guard))
    }

    /// Whether this scratch holds D and the dQ accumulator of a call whose q has shape
    /// `q_shape` in this mode (a call that also needs group-split partials the scratch
    /// lacks allocates them for itself).
    pub fn fits(&self, q_shape: [usize; 4], deterministic: bool) -> bool {
        let (need, have) = (ScratchNeed::of(q_shape, deterministic), self.capacity());
        have.dvec >= need.dvec && have.dq_accum >= need.dq_accum
    }
}

/// The stream guards of a bound scratch: D's, the accumulator's, the partials'.
pub(crate) type Guards<'a> = (
    SyncOnDrop<'a>,
    Option<SyncOnDrop<'a>>,
    Option<SyncOnDrop<'a>>,
);

/// An optional scratch buffer as the checks see it, and its guard.
pub(crate) fn bind_optional<'a>(
    buf: Option<&'a mut CudaSlice<f32>>,
    stream: &'a Arc<CudaStream>,
) -> (Option<BufDesc>, Option<SyncOnDrop<'a>>) {
    match buf {
        Some(a) => {
            let len = a.len();
            let (ptr, guard) = a.device_ptr_mut(stream);
            (Some(BufDesc { ptr, len }), Some(guard))
        }
        None => (None, None),
    }
}

impl FlashAttention {
    /// The scratch [`BwdScratch::for_shapes`] allocates.
    pub(crate) fn bwd_scratch_need(
        &self,
        q_shape: [usize; 4],
        k_shape: [usize; 4],
        opts: &BwdOptions,
    ) -> ScratchNeed {
        let shapes = (q_shape, k_shape);
        bwd_scratch_need(shapes, opts, self.arch, self.gpu_fill())
            .unwrap_or_else(|| ScratchNeed::of(q_shape, opts.deterministic))
    }
}
