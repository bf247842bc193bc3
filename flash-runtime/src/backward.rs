//! [`FlashAttention::backward`]: the checked backward launches (the scratch buffers a
//! caller may keep between calls, [`BwdScratch`], are in `bwd_scratch`).

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice,
};

use crate::FlashAttention;
use crate::attention::{alloc, prod_of};
use crate::bwd_scratch::{BwdScratch, bind_optional};
use crate::error::{FlashError, Result};
use crate::outputs::Gradients;
use crate::params::{AttnParams, BwdOptions};
use crate::tensor::{Element, Tensor4, Tensor4Mut};
use crate::validate::{BufDesc, BwdArgs, BwdPlan, ZeroFill, plan_bwd_fill};

fn fill_zero<T: Element>(
    stream: &Arc<CudaStream>,
    view: &mut CudaViewMut<'_, T>,
    z: &ZeroFill,
) -> Result<()> {
    for &s in &z.starts {
        let mut run = view
            .try_slice_mut(s..s.saturating_add(z.run_len))
            .ok_or_else(|| {
                FlashError::Internal(format!("zero-fill run of `{}` out of its view", z.tensor))
            })?;
        stream.memset_zeros(&mut run)?;
    }
    Ok(())
}

/// What a backward reads: the forward's inputs and outputs, and the loss gradient w.r.t. o.
/// `lse` is the forward's f32 `[batch, heads, seqlen_q]`.
#[derive(Clone, Copy)]
pub struct BwdInputs<'a, 'b, T> {
    /// Queries `[b, sq, h, d]`.
    pub q: &'b Tensor4<'a, T>,
    /// Keys `[b, sk, hk, d]`.
    pub k: &'b Tensor4<'a, T>,
    /// Values `[b, sk, hk, d]`.
    pub v: &'b Tensor4<'a, T>,
    /// The forward's output, like q.
    pub o: &'b Tensor4<'a, T>,
    /// The forward's log-sum-exp, f32 `[b, h, sq]`, contiguous.
    pub lse: &'b CudaView<'a, f32>,
    /// dL/do, like q.
    pub d_o: &'b Tensor4<'a, T>,
}

/// Where a preallocated backward writes: dq like q, dk and dv like k and v (each summed
/// over the `heads / heads_k` query heads sharing a kv head).
pub struct GradsMut<'a, 'b, T> {
    /// dL/dq.
    pub dq: &'b mut Tensor4Mut<'a, T>,
    /// dL/dk.
    pub dk: &'b mut Tensor4Mut<'a, T>,
    /// dL/dv.
    pub dv: &'b mut Tensor4Mut<'a, T>,
}

impl FlashAttention {
    /// Attention backward, allocating: the gradients dq (like q) and dk, dv (like k and v),
    /// contiguous; see [`FlashAttention::backward_into`] for the rules and the
    /// preallocated form. `params` must be the forward's.
    ///
    /// ```no_run
    /// use flash_runtime::{AttnParams, BwdInputs, BwdOptions, FlashAttention, Tensor4};
    /// # fn main() -> flash_runtime::Result<()> {
    /// let rt = FlashAttention::on_device(0)?;
    /// let stream = rt.context().default_stream();
    /// let shape = [2, 1024, 16, 128]; // [batch, seqlen, heads, head_dim]
    /// let x = vec![half::bf16::from_f32(0.5); shape.iter().product()];
    /// let (q, k, v, d_o) = (
    ///     stream.clone_htod(&x)?,
    ///     stream.clone_htod(&x)?,
    ///     stream.clone_htod(&x)?,
    ///     stream.clone_htod(&x)?,
    /// );
    /// let t = |x| Tensor4::contiguous(x, shape);
    /// let (q, k, v, d_o) = (t(&q), t(&k), t(&v), t(&d_o));
    /// let params = AttnParams::causal(); // one value for both passes
    /// let fwd = rt.forward(&stream, &q, &k, &v, &params)?;
    /// let (o, lse) = (fwd.o(), fwd.lse());
    /// let inputs = BwdInputs { q: &q, k: &k, v: &v, o: &o, lse: &lse, d_o: &d_o };
    /// let grads = rt.backward(&stream, inputs, &params, &BwdOptions::default())?;
    /// # let _ = grads.dq;
    /// # Ok(()) }
    /// ```
    pub fn backward<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        inputs: BwdInputs<'_, '_, T>,
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
        self.backward_into(stream, inputs, grads, params, opts, None)?;
        Ok(Gradients {
            dq,
            dk,
            dv,
            q_shape,
            kv_shape,
        })
    }

    /// Attention backward into preallocated gradients: from the forward's inputs, its
    /// output `o` and `lse`, and `d_o` (the loss gradient w.r.t. o), writes dq (like q) and
    /// dk, dv (like k, v; each summed over the `heads / heads_k` query heads sharing a kv
    /// head), enqueued on `stream`.
    ///
    /// `params` must be the forward's. Same layout rules as [`FlashAttention::forward_into`].
    /// Atomic mode (default) runs three kernels (D, main pass with f32 atomics for dQ, dQ
    /// conversion); [`BwdOptions::deterministic`] gives bitwise reproducible gradients for
    /// ~7/5 of the matmul FLOPs. `scratch`: `None` allocates it per call (see
    /// [`BwdScratch`]). An empty problem launches nothing and zero-fills the gradients that
    /// have elements (e.g. dq when `seqlen_k == 0`). Every check runs before the first
    /// launch and fails with a typed [`FlashError`]; the launches are asynchronous.
    pub fn backward_into<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        inputs: BwdInputs<'_, '_, T>,
        grads: GradsMut<'_, '_, T>,
        params: &AttnParams,
        opts: &BwdOptions,
        scratch: Option<&mut BwdScratch>,
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
        ] {
            self.check_ctx(what, ctx)?;
        }
        if let Some(s) = &scratch {
            self.check_ctx("scratch", s.dvec.context())?;
        }
        let mut owned: Option<BwdScratch> = None;
        let plan = {
            // The guards make `stream` wait for earlier writes (for outputs, also reads) of
            // each buffer; dropped after the launches, they record this call's events.
            let (q_ptr, _q) = q.view.device_ptr(stream);
            let (k_ptr, _k) = k.view.device_ptr(stream);
            let (v_ptr, _v) = v.view.device_ptr(stream);
            let (o_ptr, _o) = o.view.device_ptr(stream);
            let (do_ptr, _do) = d_o.view.device_ptr(stream);
            let lse_len = lse.len();
            let (lse_ptr, _lse) = lse.device_ptr(stream);
            let (dq_desc, dk_desc, dv_desc) = (dq.desc(0), dk.desc(0), dv.desc(0));
            let (dq_ptr, _dq) = dq.view.device_ptr_mut(stream);
            let (dk_ptr, _dk) = dk.view.device_ptr_mut(stream);
            let (dv_ptr, _dv) = dv.view.device_ptr_mut(stream);
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
            // Dry run first: every input is checked before any scratch is allocated. The
            // long-sequence tiling only where this runtime has its PTX (else the standard
            // tiling computes the same).
            let dry = plan_bwd_fill(&args, self.arch, true, self.gpu_fill())?;
            let long_tiles = dry.launches.iter().all(|l| self.has_ptx(&l.spec));
            let dry = match long_tiles {
                true => dry,
                false => plan_bwd_fill(&args, self.arch, false, self.gpu_fill())?,
            };
            if !dry.launches.is_empty() {
                let s = match scratch {
                    Some(s) => s,
                    None => owned.insert(BwdScratch::with_need(stream, dry.scratch)?),
                };
                // a caller's scratch without room for the group split's partials: this
                // call's own (stream-ordered, freed after the launches)
                let need = dry.scratch.dkv_partial;
                let mut own_partial = match s.capacity().dkv_partial < need {
                    true => Some(alloc::<f32>(stream, need)?),
                    false => None,
                };
                let (mut desc, _guards) = s.bind(stream);
                let (partial, _partial_guard) = bind_optional(own_partial.as_mut(), stream);
                desc.dkv_partial = partial.or(desc.dkv_partial);
                args.scratch = Some(desc);
                let plan = plan_bwd_fill(&args, self.arch, long_tiles, self.gpu_fill())?;
                return self.launch_bwd(stream, &plan);
            }
            dry
        };
        self.zero_fill(stream, &plan, dq, dk, dv)
    }

    /// Enqueue a bound backward plan (called with every buffer's guard held).
    pub(crate) fn launch_bwd(&self, stream: &Arc<CudaStream>, plan: &BwdPlan) -> Result<()> {
        if !plan.scratch_bound {
            return Err(FlashError::Internal("backward plan without scratch".into()));
        }
        // Load (JIT) every kernel first: a rejected PTX then launches nothing.
        let fs = plan
            .launches
            .iter()
            .map(|l| self.function(&l.spec))
            .collect::<Result<Vec<CudaFunction>>>()?;
        for (f, l) in fs.iter().zip(&plan.launches) {
            // SAFETY:
            // - `f` is `l.spec`'s entry; `l` comes from `plan_bwd`, which bound its parameters
            //   in the order and PTX types of `abi::params(l.spec.pass)`.
            // - Every pointer comes from a live cudarc view or slice of this context (checked
            //   in `backward_into`); `plan_bwd` proved that q, k, v, o, dO, dq, dk, dv stay inside
            //   their views with 16-byte aligned bases and strides, that dq/dk/dv elements are
            //   disjoint, that lse holds b*h*sq f32, dvec b*h*sq f32 and (atomic mode)
            //   dq_accum b*h*16ceil(sq/16)*d f32, and passes 0 for dq_accum in deterministic mode;
            //   with 2^s > 1 group splits (s <= log2(h / hk), so the main grid's y stays within
            //   h), dkv_partial holds 2^s*2*b*sk*hk*d f32, 16-byte aligned.
            // - Inputs (q, k, v, o, dO, lse) are shared borrows, only read; dq, dk, dv and the
            //   scratch are exclusive borrows (or owned), so no other live view aliases them.
            // - The launches are stream-ordered: Bwd reads the D (and zeroed dq_accum) BwdPre
            //   wrote, BwdKvSum reads the partials Bwd wrote (every element of them: each
            //   split's CTAs store all rows below sk and columns below d), BwdPost reads the
            //   finished accumulator.
            // - The guards in `backward_into` outlive the launches; an owned scratch is freed on
            //   this stream (stream-ordered) after them.
            unsafe { self.launch_unchecked(stream, f, l) }?;
        }
        Ok(())
    }

    pub(crate) fn zero_fill<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        plan: &BwdPlan,
        dq: &mut Tensor4Mut<'_, T>,
        dk: &mut Tensor4Mut<'_, T>,
        dv: &mut Tensor4Mut<'_, T>,
    ) -> Result<()> {
        for z in &plan.zero_fill {
            match z.tensor {
                "dq" => fill_zero(stream, &mut dq.view, z)?,
                "dk" => fill_zero(stream, &mut dk.view, z)?,
                "dv" => fill_zero(stream, &mut dv.view, z)?,
                t => return Err(FlashError::Internal(format!("zero-fill of `{t}`"))),
            }
        }
        Ok(())
    }
}
