//! [`FlashAttention::forward`] and [`FlashAttention::forward_into`]: the checked forward
//! launch, allocating or into the caller's buffers.

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop,
};

use crate::FlashAttention;
use crate::attention::{alloc, prod_of};
use crate::error::Result;
use crate::outputs::Forward;
use crate::params::AttnParams;
use crate::tensor::{Element, Tensor4, Tensor4Mut};
use crate::validate::{AlibiDesc, BufDesc, FwdArgs, LseDesc, plan_fwd_on};

impl FlashAttention {
    /// Attention forward, allocating: `o = softmax(q k^T * scale + mask) v` (contiguous,
    /// shaped like q) and `lse` (f32 `[batch, heads, seqlen_q]`, natural log), enqueued on
    /// `stream`; see [`FlashAttention::forward_into`] for the rules and the preallocated
    /// form.
    pub fn forward<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        k: &Tensor4<'_, T>,
        v: &Tensor4<'_, T>,
        params: &AttnParams,
    ) -> Result<Forward<T>> {
        let (mut o, mut lse) = alloc_outputs(stream, q.shape())?;
        let mut o_t = Tensor4Mut::contiguous(&mut o, q.shape());
        self.forward_into(stream, q, k, v, &mut o_t, Some(lse.as_view_mut()), params)?;
        Ok(Forward {
            o,
            lse,
            shape: q.shape(),
        })
    }

    /// Attention forward into preallocated outputs: `o = softmax(q k^T * scale + mask) v`
    /// and, if given, `lse` (f32 `[batch, heads, seqlen_q]`, contiguous, natural log),
    /// enqueued on `stream`.
    ///
    /// q `[b, sq, h, d]`, k and v `[b, sk, hk, d]`, o like q; `h % hk == 0`; `d` a multiple
    /// of 8 up to 256. Every check runs before the launch and fails with a typed
    /// [`FlashError`](crate::FlashError); the launch itself is asynchronous. On compute
    /// capability 9.0 the sm_90a forward runs the calls it can, the sm_80 one the others
    /// ([`ForwardArch`](crate::ForwardArch), [`FlashAttention::set_forward_arch`]).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_into<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        k: &Tensor4<'_, T>,
        v: &Tensor4<'_, T>,
        o: &mut Tensor4Mut<'_, T>,
        mut lse: Option<CudaViewMut<'_, f32>>,
        params: &AttnParams,
    ) -> Result<()> {
        self.check_ctx("stream", stream.context())?;
        self.check_ctx("q", q.view.stream().context())?;
        self.check_ctx("k", k.view.stream().context())?;
        self.check_ctx("v", v.view.stream().context())?;
        self.check_ctx("o", o.view.stream().context())?;
        if let Some(l) = &lse {
            self.check_ctx("lse", l.stream().context())?;
        }
        // The guards make `stream` wait for earlier writes (and, for o/lse, reads) of each
        // buffer; dropped after the launch, they record this launch's read/write events.
        let (q_ptr, _q_guard) = q.view.device_ptr(stream);
        let (k_ptr, _k_guard) = k.view.device_ptr(stream);
        let (v_ptr, _v_guard) = v.view.device_ptr(stream);
        let o_desc = o.desc(0);
        let (o_ptr, _o_guard) = o.view.device_ptr_mut(stream);
        let (lse_desc, _lse_guard) = lse_arg(stream, &mut lse);
        let (alibi, _alibi_guard) = self.alibi_arg(stream, params)?;
        let args = FwdArgs {
            q: q.desc(q_ptr),
            k: k.desc(k_ptr),
            v: v.desc(v_ptr),
            o: o_desc.with_ptr(o_ptr),
            lse: lse_desc,
            params: *params,
            alibi,
        };
        // (the d256 forward on its compact tiling where the GPU has too little shared
        // memory per block for the standard one)
        let plan = plan_fwd_on(&args, self.arch, self.smem_optin)?;
        if plan.is_noop() {
            return Ok(());
        }
        if let Some(call) = self.sm90_fwd_choice(&args)? {
            // SAFETY (`launch_sm90_call`'s contract):
            // - Every pointer comes from a live cudarc view of this context (checked above);
            //   `plan_fwd_on` proved each tensor's shape and strides stay inside its view,
            //   that o's elements are disjoint and lse holds batch*heads*seqlen_q f32, and
            //   `sm90_fwd_call` that q, k, v suit their tensor maps and o its map (`o_tma`,
            //   the TMA epilogue's) or the pair stores, both writing the same elements.
            // - q, k, v are only read; o and lse are borrowed mutably, so nothing else
            //   aliases them; the guards above outlive the launch.
            return unsafe { self.launch_sm90_call(stream, &call) };
        }
        let f = self.function(&plan.spec)?;
        // SAFETY:
        // - `f` is `plan.spec`'s entry and `plan` comes from `plan_fwd_on`, which bound its
        //   parameters in the order and PTX types of `abi::FWD_PARAMS`.
        // - Every pointer comes from a live cudarc view of this context (checked above) and
        //   `plan_fwd` proved each tensor's shape and strides stay inside its view, that o's
        //   elements are disjoint, that lse holds batch*heads*seqlen_q f32, and alignment.
        // - q/k/v (and ALiBi's slopes, whose length `plan_fwd` checked) are only read; o
        //   and lse are borrowed mutably, so nothing else aliases them.
        // - The guards above outlive the launch, so no buffer is freed or reused early.
        unsafe { self.launch_unchecked(stream, &f, &plan) }
    }
}

impl FlashAttention {
    /// ALiBi's slopes of `params` as the checks see them, and their guard (`stream` waits
    /// for the buffer's earlier writes; dropped after the launch, it records this read).
    pub(crate) fn alibi_arg<'a>(
        &self,
        stream: &'a Arc<CudaStream>,
        params: &AttnParams<'a>,
    ) -> Result<(Option<AlibiDesc>, Option<SyncOnDrop<'a>>)> {
        let Some(a) = params.alibi else {
            return Ok((None, None));
        };
        let slopes = a.slopes();
        self.check_ctx("alibi slopes", slopes.context())?;
        let len = slopes.len();
        let (ptr, guard) = slopes.device_ptr(stream);
        let desc = AlibiDesc {
            slopes: BufDesc { ptr, len },
            per_batch: a.is_per_batch(),
        };
        Ok((Some(desc), Some(guard)))
    }
}

/// Contiguous outputs of a forward of q shaped `shape` (`[b, sq, h, d]`): o like q and lse
/// f32 `[b, h, sq]`, zeroed, on `stream`.
pub(crate) fn alloc_outputs<T: Element>(
    stream: &Arc<CudaStream>,
    shape: [usize; 4],
) -> Result<(CudaSlice<T>, CudaSlice<f32>)> {
    let [b, sq, h, _] = shape;
    Ok((
        alloc(stream, prod_of(&shape))?,
        alloc(stream, prod_of(&[b, h, sq]))?,
    ))
}

/// The optional lse output's pointer and length, and its guard: `stream` waits for the
/// buffer's earlier uses, and the guard, dropped after the launch, records this one.
pub(crate) fn lse_arg<'a>(
    stream: &'a Arc<CudaStream>,
    lse: &'a mut Option<CudaViewMut<'_, f32>>,
) -> (Option<LseDesc>, Option<SyncOnDrop<'a>>) {
    match lse.as_mut() {
        Some(l) => {
            let len = l.len();
            let (ptr, guard) = l.device_ptr_mut(stream);
            (Some(LseDesc { ptr, len }), Some(guard))
        }
        None => (None, None),
    }
}
