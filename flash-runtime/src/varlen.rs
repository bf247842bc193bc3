//! Packed variable-length batches (FlashAttention's varlen API): [`Varlen`] and
//! [`FlashAttention::forward_varlen`], [`FlashAttention::backward_varlen`] and their
//! `_into` forms.
//!
//! The sequences lie back to back: q, o, dO, dq are [`Tensor4`]s of shape `[1, total_q,
//! heads, head_dim]` (FA2's `[total_q, heads, head_dim]` with a batch dim of 1), k, v,
//! dk, dv `[1, total_k, heads_k, head_dim]`; sequence `b` is rows `cu_seqlens_q[b] ..
//! cu_seqlens_q[b + 1]` (likewise for k) and its own attention problem (causal:
//! bottom-right per sequence); lse is f32 `[heads, total_q]`. Rows of no sequence are not
//! written. A sequence with queries and no keys gets `o = 0`, `lse = -inf`, `dq = 0`.
//!
//! The offsets stay on the device and may hold anything: the kernels clamp them to the
//! buffers (no access outside q, k, v, o, lse or the gradients whatever they hold);
//! offsets that are not non-decreasing from 0 give meaningless values. `max_seqlen_q` and
//! `max_seqlen_k` must be at least every sequence's length: rows of a longer sequence past
//! them are not computed.

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice};

use crate::FlashAttention;
use crate::attention::{alloc, prod_of};
use crate::backward::{BwdInputs, GradsMut};
use crate::bwd_scratch::BwdScratch;
use crate::error::Result;
use crate::forward::{alloc_outputs, lse_arg};
use crate::outputs::{Forward, Gradients};
use crate::params::{AttnParams, BwdOptions};
use crate::tensor::{Element, Tensor4, Tensor4Mut};
use crate::validate::{
    BufDesc, BwdArgs, FwdArgs, VarlenDesc, plan_bwd_varlen_fill, plan_fwd_varlen,
};

/// The offsets of a packed batch: `cu_seqlens_q` and `cu_seqlens_k`, i32 `[batch + 1]` on
/// the device, and the longest sequences (at least every sequence's length).
pub struct Varlen<'a> {
    cu_seqlens_q: CudaView<'a, i32>,
    cu_seqlens_k: CudaView<'a, i32>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
}

impl<'a> Varlen<'a> {
    /// Offsets `cu_seqlens_q` (queries of sequence `b`: rows `cu[b] .. cu[b + 1]`) and
    /// `cu_seqlens_k`, each `batch + 1` i32, and the longest query and key sequences.
    pub fn new(
        cu_seqlens_q: CudaView<'a, i32>,
        cu_seqlens_k: CudaView<'a, i32>,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
    ) -> Self {
        Varlen {
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
        }
    }

    /// Sequences in the batch (`cu_seqlens_q.len() - 1`).
    pub fn batch(&self) -> usize {
        self.cu_seqlens_q.len().saturating_sub(1)
    }

    /// What the checks see, with the offsets at `ptrs`.
    fn desc(&self, ptrs: (u64, u64)) -> VarlenDesc {
        VarlenDesc {
            cu_seqlens_q: BufDesc {
                ptr: ptrs.0,
                len: self.cu_seqlens_q.len(),
            },
            cu_seqlens_k: BufDesc {
                ptr: ptrs.1,
                len: self.cu_seqlens_k.len(),
            },
            max_seqlen_q: self.max_seqlen_q,
            max_seqlen_k: self.max_seqlen_k,
        }
    }
}

impl FlashAttention {
    /// Varlen forward, allocating o (like q) and lse (f32 `[heads, total_q]`); see
    /// [`FlashAttention::forward_varlen_into`].
    pub fn forward_varlen<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        (q, k, v): (&Tensor4<'_, T>, &Tensor4<'_, T>, &Tensor4<'_, T>),
        varlen: &Varlen<'_>,
        params: &AttnParams,
    ) -> Result<Forward<T>> {
        let (mut o, mut lse) = alloc_outputs(stream, q.shape())?;
        let mut o_t = Tensor4Mut::contiguous(&mut o, q.shape());
        let lse_v = Some(lse.as_view_mut());
        self.forward_varlen_into(stream, (q, k, v), (&mut o_t, lse_v), varlen, params)?;
        Ok(Forward {
            o,
            lse,
            shape: q.shape(),
        })
    }

    /// Varlen forward into preallocated outputs: each sequence's `o = softmax(q k^T *
    /// scale + mask) v` and, if given, its lse rows (f32 `[heads, total_q]`), enqueued on
    /// `stream`. The packed layout and the offsets' contract: [`crate::Varlen`]'s module
    /// docs. Every host-side check runs before the launch (typed errors).
    pub fn forward_varlen_into<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        (q, k, v): (&Tensor4<'_, T>, &Tensor4<'_, T>, &Tensor4<'_, T>),
        (o, mut lse): (&mut Tensor4Mut<'_, T>, Option<CudaViewMut<'_, f32>>),
        varlen: &Varlen<'_>,
        params: &AttnParams,
    ) -> Result<()> {
        self.check_ctx("stream", stream.context())?;
        for (what, ctx) in [
            ("q", q.view.stream().context()),
            ("k", k.view.stream().context()),
            ("v", v.view.stream().context()),
            ("o", o.view.stream().context()),
            ("cu_seqlens_q", varlen.cu_seqlens_q.stream().context()),
            ("cu_seqlens_k", varlen.cu_seqlens_k.stream().context()),
        ] {
            self.check_ctx(what, ctx)?;
        }
        if let Some(l) = &lse {
            self.check_ctx("lse", l.stream().context())?;
        }
        let (q_ptr, _q) = q.view.device_ptr(stream);
        let (k_ptr, _k) = k.view.device_ptr(stream);
        let (v_ptr, _v) = v.view.device_ptr(stream);
        let (cq, _cq) = varlen.cu_seqlens_q.device_ptr(stream);
        let (ck, _ck) = varlen.cu_seqlens_k.device_ptr(stream);
        let o_desc = o.desc(0);
        let (o_ptr, _o) = o.view.device_ptr_mut(stream);
        let (lse_desc, _lse) = lse_arg(stream, &mut lse);
        let (alibi, _alibi) = self.alibi_arg(stream, params)?;
        let args = FwdArgs {
            q: q.desc(q_ptr),
            k: k.desc(k_ptr),
            v: v.desc(v_ptr),
            o: o_desc.with_ptr(o_ptr),
            lse: lse_desc,
            params: *params,
            alibi,
        };
        let plan = plan_fwd_varlen(&args, &varlen.desc((cq, ck)), self.arch, self.smem_optin)?;
        if plan.is_noop() {
            return Ok(());
        }
        let f = self.function(&plan.spec)?;
        // SAFETY:
        // - `f` is `plan.spec`'s entry; `plan_fwd_varlen` bound its parameters in the order
        //   and PTX types of `abi::FWD_VARLEN_PARAMS`, after the dense checks of the packed
        //   tensors (batch 1 of total rows: every row the kernel can address, with the
        //   offsets clamped to [0, total], lies inside its view) and of the offsets' buffers.
        // - Every pointer comes from a live cudarc view of this context (checked above);
        //   q, k, v and the offsets are only read; o and lse are borrowed mutably.
        // - The guards above outlive the launch.
        unsafe { self.launch_unchecked(stream, &f, &plan) }
    }

    /// Varlen backward, allocating dq (like q) and dk, dv (like k, v); see
    /// [`FlashAttention::backward_varlen_into`].
    pub fn backward_varlen<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        inputs: BwdInputs<'_, '_, T>,
        varlen: &Varlen<'_>,
        params: &AttnParams,
        opts: &BwdOptions,
    ) -> Result<Gradients<T>> {
        let (q_shape, kv_shape) = (inputs.q.shape(), inputs.k.shape());
        let mut dq = alloc(stream, prod_of(&q_shape))?;
        let mut dk = alloc(stream, prod_of(&kv_shape))?;
        let mut dv = alloc(stream, prod_of(&kv_shape))?;
        let grads = GradsMut {
            dq: &mut Tensor4Mut::contiguous(&mut dq, q_shape),
            dk: &mut Tensor4Mut::contiguous(&mut dk, kv_shape),
            dv: &mut Tensor4Mut::contiguous(&mut dv, kv_shape),
        };
        self.backward_varlen_into(stream, inputs, grads, varlen, params, opts)?;
        Ok(Gradients {
            dq,
            dk,
            dv,
            q_shape,
            kv_shape,
        })
    }

    /// Varlen backward into preallocated gradients: each sequence's dq and dk, dv (summed
    /// over a group's query heads), from the forward's inputs, o, lse (`[heads, total_q]`)
    /// and dO, enqueued on `stream`; atomic or deterministic as [`BwdOptions`] says. The
    /// scratch (D `[heads, total_q]`, and the dq accumulator in atomic mode) is allocated
    /// per call. `params` must be the forward's.
    pub fn backward_varlen_into<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        inputs: BwdInputs<'_, '_, T>,
        grads: GradsMut<'_, '_, T>,
        varlen: &Varlen<'_>,
        params: &AttnParams,
        opts: &BwdOptions,
    ) -> Result<()> {
        let BwdInputs {
            q,
            k,
            v,
            o,
            lse,
            d_o,
        } = inputs;
        let GradsMut { dq, dk, dv } = grads;
        for (what, ctx) in [
            ("stream", stream.context()),
            ("q", q.view.stream().context()),
            ("k", k.view.stream().context()),
            ("v", v.view.stream().context()),
            ("o", o.view.stream().context()),
            ("lse", lse.stream().context()),
            ("d_o", d_o.view.stream().context()),
            ("dq", dq.view.stream().context()),
            ("dk", dk.view.stream().context()),
            ("dv", dv.view.stream().context()),
            ("cu_seqlens_q", varlen.cu_seqlens_q.stream().context()),
            ("cu_seqlens_k", varlen.cu_seqlens_k.stream().context()),
        ] {
            self.check_ctx(what, ctx)?;
        }
        let plan = {
            let (q_ptr, _q) = q.view.device_ptr(stream);
            let (k_ptr, _k) = k.view.device_ptr(stream);
            let (v_ptr, _v) = v.view.device_ptr(stream);
            let (o_ptr, _o) = o.view.device_ptr(stream);
            let (do_ptr, _do) = d_o.view.device_ptr(stream);
            let (cq, _cq) = varlen.cu_seqlens_q.device_ptr(stream);
            let (ck, _ck) = varlen.cu_seqlens_k.device_ptr(stream);
            let lse_len = lse.len();
            let (lse_ptr, _lse) = lse.device_ptr(stream);
            let (dq_desc, dk_desc, dv_desc) = (dq.desc(0), dk.desc(0), dv.desc(0));
            let (dq_ptr, _dq) = dq.view.device_ptr_mut(stream);
            let (dk_ptr, _dk) = dk.view.device_ptr_mut(stream);
            let (dv_ptr, _dv) = dv.view.device_ptr_mut(stream);
            let vd = varlen.desc((cq, ck));
            let (alibi, _alibi) = self.alibi_arg(stream, params)?;
            let mut args = BwdArgs {
                q: q.desc(q_ptr),
                k: k.desc(k_ptr),
                v: v.desc(v_ptr),
                o: o.desc(o_ptr),
                d_o: d_o.desc(do_ptr),
                dq: dq_desc.with_ptr(dq_ptr),
                dk: dk_desc.with_ptr(dk_ptr),
                dv: dv_desc.with_ptr(dv_ptr),
                lse: BufDesc {
                    ptr: lse_ptr,
                    len: lse_len,
                },
                scratch: None,
                params: *params,
                alibi,
                opts: *opts,
            };
            let dry = plan_bwd_varlen_fill(&args, &vd, self.arch, self.cc, self.gpu_fill())?;
            if !dry.launches.is_empty() {
                let mut s = BwdScratch::with_need(stream, dry.scratch)?;
                let (desc, _guards) = s.bind(stream);
                args.scratch = Some(desc);
                // SAFETY (of the launches in `launch_bwd`): as for the dense backward, with
                // `plan_bwd_varlen`'s checks: the dense checks of the packed tensors (batch
                // 1 of total rows) and the varlen scratch (D [heads, total_q], dq_accum
                // heads * 16 ceil((total_q + 16 batch) / 16) * head_dim); the kernels clamp
                // the offsets to the totals. `s` is freed stream-ordered after the launches.
                let plan = plan_bwd_varlen_fill(&args, &vd, self.arch, self.cc, self.gpu_fill())?;
                return self.launch_bwd(stream, &plan);
            }
            dry
        };
        self.zero_fill(stream, &plan, dq, dk, dv)
    }
}
