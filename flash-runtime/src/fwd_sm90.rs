//! The Hopper forward's launch (`flash_codegen::kernels::sm90::fwd`, issue 22): one launch
//! function for [`FlashAttention::forward_into`]'s calls that `validate::sm90_fwd_call`
//! accepts (`ForwardArch`) and for [`FlashAttention::launch_fwd_sm90`], which tests and
//! benches call directly on contiguous `[b, s, h, d]` tensors with a chosen schedule.

use std::collections::btree_map::Entry;
use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use flash_codegen::Scores;
use flash_codegen::kernels::sm90::fwd;

use crate::attention::{FlashAttention, capturing, lock};
use crate::error::{FlashError, Result};
use crate::fwd_sm90_shape::{Sm90FwdShape, fwd_variant};
use crate::tensor::Element;
use crate::tensor_map::{TensorMap, TensorMapLayout};
use crate::validate::{Sm90FwdCall, Sm90Out, Sm90ScoreArgs, TmaSource};

impl FlashAttention {
    /// Runs the sm_90a forward: `o` = softmax(q k^T / sqrt(d)) v, `lse` (`[b, h, sq]`) when
    /// given.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn launch_fwd_sm90<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        sh: Sm90FwdShape,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        o: &mut CudaSlice<T>,
        lse: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        self.launch_fwd_sm90_scored(stream, sh, (q, k, v), o, lse, (None, None))
    }

    /// [`FlashAttention::launch_fwd_sm90`] with `sh.scores`' values: a softcap's cap
    /// (finite, > 0) for `Scores::Softcap`, ALiBi's slopes (`[heads]`, or `[batch, heads]`
    /// with the flag) for `Scores::Alibi`, neither for plain scores.
    #[doc(hidden)]
    #[allow(clippy::type_complexity)]
    pub fn launch_fwd_sm90_scored<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        sh: Sm90FwdShape,
        (q, k, v): (&CudaSlice<T>, &CudaSlice<T>, &CudaSlice<T>),
        o: &mut CudaSlice<T>,
        lse: Option<&mut CudaSlice<f32>>,
        (softcap, alibi): (Option<f32>, Option<(&CudaSlice<f32>, bool)>),
    ) -> Result<()> {
        let bad = |why: String| Err(FlashError::InvalidParam(format!("{sh:?}: {why}")));
        match (sh.scores, softcap, alibi) {
            (Scores::Plain, None, None) => {}
            (Scores::Softcap, Some(c), None) if c.is_finite() && c > 0.0 => {}
            (Scores::Alibi, None, Some((s, per_batch))) => {
                self.check_ctx("alibi slopes", s.stream().context())?;
                let need = sh.heads * if per_batch { sh.batch } else { 1 };
                if s.len() < need {
                    return bad(format!("{} ALiBi slopes, need {need}", s.len()));
                }
                if sh.window.is_some() {
                    return bad("ALiBi takes no window".into());
                }
            }
            _ => {
                return bad(format!(
                    "scores {:?} with softcap {softcap:?} and slopes {}",
                    sh.scores,
                    alibi.is_some()
                ));
            }
        }
        self.check_ctx("stream", stream.context())?;
        self.check_ctx("q", q.stream().context())?;
        self.check_ctx("k", k.stream().context())?;
        self.check_ctx("v", v.stream().context())?;
        self.check_ctx("o", o.stream().context())?;
        if let Some(l) = &lse {
            self.check_ctx("lse", l.stream().context())?;
        }
        if self.compute_capability() != (9, 0) {
            return Err(FlashError::InvalidParam(format!(
                "the sm_90a forward needs compute capability 9.0, this GPU has {:?}",
                self.compute_capability()
            )));
        }
        let (b, sq, sk, h, hk, d) = sh.sizes();
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
        let prod = |xs: [usize; 4]| {
            xs.iter()
                .try_fold(1usize, |acc, &x| acc.checked_mul(x))
                .ok_or_else(|| {
                    FlashError::ShapeMismatch(format!("{sh:?}: the tensors' sizes overflow usize"))
                })
        };
        let (nq, nk, nl) = (
            prod([b, sq, h, d])?,
            prod([b, sk, hk, d])?,
            prod([b, h, sq, 1])?,
        );
        let lse_len = lse.as_ref().map_or(nl, |l| l.len());
        let lens = [q.len(), k.len(), v.len(), o.len()];
        if lens[0] < nq || lens[1] < nk || lens[2] < nk || lens[3] < nq || lse_len < nl {
            return Err(FlashError::ShapeMismatch(format!(
                "{sh:?}: q, k, v, o hold {lens:?} elements, need {nq}, {nk}, {nk}, {nq}; lse \
                 {lse_len}, needs {nl}"
            )));
        }
        if b == 0 || sq == 0 || h == 0 {
            return Ok(());
        }
        let variant = fwd_variant(T::DTYPE, &sh)?;
        let u = |x: usize| -> Result<u32> {
            u32::try_from(x)
                .map_err(|_| FlashError::ShapeMismatch(format!("{sh:?}: {x} is over 2^32")))
        };
        let (o_row, o_head) = (u(h * d)?, u(d)?);
        let (qp, _q) = q.device_ptr(stream);
        let (kp, _k) = k.device_ptr(stream);
        let (vp, _v) = v.device_ptr(stream);
        let (op, _o) = o.device_ptr_mut(stream);
        let (lp, _l) = match lse {
            Some(l) => {
                let (p, g) = l.device_ptr_mut(stream);
                (p, Some(g))
            }
            None => (0, None),
        };
        let (slopes, _s) = match alibi {
            Some((s, per_batch)) => {
                let (p, g) = s.device_ptr(stream);
                (Some((p, if per_batch { u(h)? } else { 0 })), Some(g))
            }
            None => (None, None),
        };
        let scores = Sm90ScoreArgs {
            softcap: softcap.unwrap_or(0.0),
            slopes: slopes.map_or(0, |s| s.0),
            slopes_batch_stride: slopes.map_or(0, |s| s.1),
        };
        let (q_st, kv_st) = ([sq * h * d, h * d, d], [sk * hk * d, hk * d, d]);
        let call = Sm90FwdCall {
            variant,
            shape: sh,
            q: TmaSource {
                ptr: qp,
                strides: q_st,
            },
            k: TmaSource {
                ptr: kp,
                strides: kv_st,
            },
            v: TmaSource {
                ptr: vp,
                strides: kv_st,
            },
            o: Sm90Out {
                ptr: op,
                batch: (sq * h * d) as u64,
                row: o_row,
                head: o_head,
            },
            o_tma: variant.tma_store.then_some(TmaSource {
                ptr: op,
                strides: q_st,
            }),
            lse: lp,
            scale_log2: std::f32::consts::LOG2_E / (d as f32).sqrt(),
            scores,
        };
        // SAFETY: the contract of `launch_sm90_call`: the pointers come from live cudarc
        // buffers of this context (checked above), each holding the contiguous tensor its
        // strides describe, o's map (`o_tma`) with q's strides (lengths checked above:
        // q, o `b * sq * h * d`, k, v `b * sk * hk * d`, lse `b * h * sq`, ALiBi's slopes
        // `h` or `b * h`); q, k, v and the slopes are only read, o and lse are borrowed
        // mutably; the guards outlive the launch.
        unsafe { self.launch_sm90_call(stream, &call) }
    }

    /// Enqueues the sm_90a forward `call` on `stream`: its tensor maps (encoded here, the
    /// driver's limits checked first), its entry (registered or generated, loaded on first
    /// use), its parameters (three maps, o's fourth for the TMA epilogue, then
    /// `Variant::scalars`, a dynamic kernel's claim counter allocated zeroed here) and
    /// grid `[ceil(seqlen_q / block_m), heads, batch]` (persistent: one CTA per SM).
    ///
    /// # Safety
    /// Every pointer of `call` must be a device address of this runtime's context, of a
    /// buffer that holds every element its shape and strides address (q, k, v read through
    /// their tensor maps; o at `batch * o.batch + head * o.head + row * o.row + col` for
    /// the rows below `seqlen_q`, by the pair stores or through `call.o_tma`'s map (its
    /// strides the same, a dim of one's aside); lse, unless 0, `batch * heads * seqlen_q` f32; an ALiBi
    /// variant's slopes `heads` f32, times `batch` with a batch stride), with o's
    /// elements disjoint, and that stays alive and unaliased by other writers (o, lse)
    /// until the launch has run: what `validate::sm90_fwd_call` after `plan_fwd_on`, or
    /// [`FlashAttention::launch_fwd_sm90`]'s checks, prove of a call.
    pub(crate) unsafe fn launch_sm90_call(
        &self,
        stream: &Arc<CudaStream>,
        call: &Sm90FwdCall,
    ) -> Result<()> {
        let (var, sh) = (call.variant, call.shape);
        let (b, sq, sk, h, hk, d) = sh.sizes();
        let q_map =
            TensorMapLayout::bhsd(var.dtype, [b, sq, h, d], call.q.strides, var.block_m(), 64);
        let k_map =
            TensorMapLayout::bhsd(var.dtype, [b, sk, hk, d], call.k.strides, fwd::BLOCK_N, 64);
        let v_map =
            TensorMapLayout::bhsd(var.dtype, [b, sk, hk, d], call.v.strides, fwd::BLOCK_N, 64);
        let mut maps = vec![
            TensorMap::encode(&q_map, call.q.ptr)?,
            TensorMap::encode(&k_map, call.k.ptr)?,
            TensorMap::encode(&v_map, call.v.ptr)?,
        ];
        match (var.tma_store, call.o_tma) {
            (true, Some(o)) => {
                let o_map =
                    TensorMapLayout::bhsd(var.dtype, [b, sq, h, d], o.strides, fwd::O_BOX_ROWS, 64);
                maps.push(TensorMap::encode(&o_map, o.ptr)?);
            }
            (false, None) => {}
            (tst, o) => {
                return Err(FlashError::InvalidParam(format!(
                    "runtime bug: {} with o's tensor map {o:?} (tma_store {tst})",
                    var.name()
                )));
            }
        }
        let f = self.fwd_sm90_function(var)?;
        let u = |x: usize| -> Result<u32> {
            u32::try_from(x)
                .map_err(|_| FlashError::ShapeMismatch(format!("{sh:?}: {x} is over 2^32")))
        };
        let (sq32, sk32, group, heads) = (u(sq)?, u(sk)?, u(h / hk)?, u(h)?);
        let mut lb = stream.launch_builder(&f);
        for m in &maps {
            lb.arg(m);
        }
        lb.arg(&call.o.ptr).arg(&call.lse);
        lb.arg(&sq32).arg(&sk32).arg(&group).arg(&heads);
        lb.arg(&call.o.row).arg(&call.o.head).arg(&call.o.batch);
        let batch = u(b)?;
        lb.arg(&call.scale_log2).arg(&batch);
        let (left, right) = sh.window.unwrap_or((u32::MAX, u32::MAX));
        if var.window {
            lb.arg(&left).arg(&right);
        }
        let sc = &call.scores;
        match var.scores {
            Scores::Plain => {}
            Scores::Softcap => {
                lb.arg(&sc.softcap);
            }
            Scores::Alibi => {
                lb.arg(&sc.slopes).arg(&sc.slopes_batch_stride);
            }
        }
        // the dynamic scheduler's claim counter, a zeroed u32[2] that no launch running at
        // the same time uses: this stream's (launches on one stream run in its order, and
        // each leaves the counter zeroed), the lock held until the launch is enqueued; under
        // stream capture one of the launch's own (a graph may be replayed on another
        // stream while this one runs), freed in stream order after it.
        let mut own = None;
        let mut counters = None;
        let counter: Option<&mut CudaSlice<u32>> = if !var.takes_tile_counter() {
            None
        } else if capturing(stream)? {
            Some(own.insert(stream.alloc_zeros::<u32>(2)?))
        } else {
            let cache = counters.insert(lock(&self.tile_counters));
            Some(match cache.entry(stream.cu_stream() as usize) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(stream.alloc_zeros::<u32>(2)?),
            })
        };
        // written by the kernel: the write guard held until the launch is enqueued
        let counter_arg = counter.map(|c| c.device_ptr_mut(stream));
        if let Some((p, _)) = &counter_arg {
            lb.arg(p);
        }
        let grid = var
            .grid(sq as u64, h as u64, b as u64, self.sms)
            .ok_or_else(|| {
                FlashError::ShapeMismatch(format!("{sh:?}: the grid passes 2^32 blocks"))
            })?;
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (var.threads(), 1, 1),
            shared_mem_bytes: var.smem_bytes(),
        };
        // SAFETY: the parameters are the kernel's (`Variant::maps`, then
        // `Variant::scalars`) in order and width; the maps describe q, k, v (and o) within
        // their buffers (TMA clips every box at the tensors' ends), o and lse hold the
        // elements the kernel writes (rows below seqlen_q of each head and batch), all by
        // the caller's contract, which also keeps every buffer alive until the launch is
        // enqueued; the grid's y and z are the heads and batch (persistent: 1, x at most
        // the SM count, the kernel walking every tile), within the driver's limits for
        // any u32 heads below 65536 (checked by the driver: an error, not undefined
        // behaviour); a dynamic kernel's tile_counter is a zeroed u32[2] that no launch
        // running at the same time uses (above).
        unsafe { lb.launch(cfg) }?;
        drop(counter_arg);
        drop(counters);
        drop(own);
        Ok(())
    }

    /// `var`'s entry, loaded on first use from its registered PTX
    /// ([`FlashAttention::register_sm90a_kernels`]), else generated when this runtime
    /// generates code, else [`FlashError::Sm90aKernelNotEmbedded`].
    fn fwd_sm90_function(&self, var: fwd::Variant) -> Result<CudaFunction> {
        let name = var.name();
        let registered = self.registered_sm90a_ptx(&name);
        if registered.is_none() && !self.generates_on_demand() {
            return Err(FlashError::Sm90aKernelNotEmbedded { variant: var });
        }
        self.load_entry_with(&name, var.smem_bytes(), || match registered {
            Some(ptx) => ptx.to_string(),
            None => flash_codegen::manifest::sm90a::ptx(var),
        })
    }
}
