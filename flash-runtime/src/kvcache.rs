//! [`FlashAttention::forward_kvcache`] and [`FlashAttention::forward_kvcache_into`]: the
//! checked KV-cache (split-KV) forward, for decoding, speculative verification and chunked
//! prefill against a preallocated cache: the split pass, then (when the keys are split)
//! the combine pass, on one stream.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    DeviceSlice, SyncOnDrop,
};

use crate::FlashAttention;
use crate::attention::{capturing, lock};
use crate::error::{FlashError, Result};
use crate::forward::{alloc_outputs, lse_arg};
use crate::outputs::Forward;
use crate::paged::KvSource;
use crate::params::{AttnParams, KvOptions};
use crate::tensor::{Element, Tensor4, Tensor4Mut};
use crate::validate::{BufDesc, GpuFill, KvArgs, PagedDesc, kvcache_splits, plan_kvcache};

/// A read-only i32 device array's pointer and length, and its guard: `stream` waits for
/// the buffer's earlier writes, and the guard, dropped after the launches, records this
/// call's read.
fn buf_arg<'a>(stream: &'a Arc<CudaStream>, s: &'a CudaView<'_, i32>) -> (BufDesc, SyncOnDrop<'a>) {
    let len = s.len();
    let (ptr, guard) = s.device_ptr(stream);
    (BufDesc { ptr, len }, guard)
}

/// An uninitialised f32 scratch buffer of `n > 0` elements on `stream`.
fn scratch(stream: &Arc<CudaStream>, n: usize) -> Result<CudaSlice<f32>> {
    if n == 0 || n > isize::MAX as usize / 4 {
        return Err(FlashError::ShapeMismatch(format!(
            "the split-KV scratch would hold {n} f32 values, more than any device has; pass \
             fewer splits (KvOptions::with_splits) or split the batch"
        )));
    }
    // SAFETY: the memory is left uninitialised. Only the two kernels of this call see it:
    // the split pass writes every element of both partial buffers (o_accum, lse_accum)
    // before the combine pass, their only reader, runs after it on the same stream
    // (`flash_codegen::abi::decode` documents that contract).
    Ok(unsafe { stream.alloc::<f32>(n) }?)
}

impl FlashAttention {
    /// What the split rule needs to know of this GPU.
    pub(crate) fn gpu_fill(&self) -> GpuFill {
        GpuFill {
            sms: self.sms,
            smem_optin: self.smem_optin,
            smem_per_sm: self.smem_per_sm(),
        }
    }

    /// KV-cache attention forward, allocating: `o` (contiguous, shaped like q) and `lse`
    /// (f32 `[batch, heads, seqlen_q]`, natural log), enqueued on `stream`; see
    /// [`FlashAttention::forward_kvcache_into`] for the rules and the preallocated form.
    ///
    /// ```no_run
    /// use flash_runtime::{AttnParams, FlashAttention, KvOptions, Tensor4};
    /// # fn main() -> flash_runtime::Result<()> {
    /// let rt = FlashAttention::on_device(0)?;
    /// let stream = rt.context().default_stream();
    /// let (b, cap, h, hk, d) = (4, 4096, 32, 8, 128); // one new token per sequence
    /// let zero = flash_runtime::half::bf16::from_f32(0.0);
    /// let q = stream.clone_htod(&vec![zero; b * h * d])?;
    /// let k_cache = stream.clone_htod(&vec![zero; b * cap * hk * d])?;
    /// let v_cache = stream.clone_htod(&vec![zero; b * cap * hk * d])?;
    /// let seqlens = stream.clone_htod(&[17i32, 4000, 1, 4096])?; // valid keys of each
    /// let out = rt.forward_kvcache(
    ///     &stream,
    ///     &Tensor4::contiguous(&q, [b, 1, h, d]),
    ///     &Tensor4::contiguous(&k_cache, [b, cap, hk, d]),
    ///     &Tensor4::contiguous(&v_cache, [b, cap, hk, d]),
    ///     Some(&seqlens.as_view()),
    ///     &AttnParams::causal(),
    ///     &KvOptions::default(),
    /// )?;
    /// # let _ = out.o;
    /// # Ok(()) }
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn forward_kvcache<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        k_cache: &Tensor4<'_, T>,
        v_cache: &Tensor4<'_, T>,
        seqlens_k: Option<&CudaView<'_, i32>>,
        params: &AttnParams,
        opts: &KvOptions,
    ) -> Result<Forward<T>> {
        let (mut o, mut lse) = alloc_outputs(stream, q.shape())?;
        let mut o_t = Tensor4Mut::contiguous(&mut o, q.shape());
        let lse_v = Some(lse.as_view_mut());
        let (k, v) = (k_cache, v_cache);
        self.forward_kvcache_into(stream, q, k, v, seqlens_k, &mut o_t, lse_v, params, opts)?;
        Ok(Forward {
            o,
            lse,
            shape: q.shape(),
        })
    }

    /// The number of key-range splits [`FlashAttention::forward_kvcache`] runs for q
    /// `[b, sq, h, d]` and caches `[b, capacity, hk, d]` of `T` with `params` and `opts` on
    /// this GPU (the split rule's choice, or `opts`' count lowered to the cache's key
    /// blocks); errors as the call would give them for a bad split count or head dim.
    pub fn kvcache_splits<T: Element>(
        &self,
        q_shape: [usize; 4],
        k_shape: [usize; 4],
        params: &AttnParams,
        opts: &KvOptions,
    ) -> Result<u32> {
        let gpu = self.gpu_fill();
        let problem = (T::DTYPE, params);
        let cache = (k_shape, None);
        kvcache_splits(q_shape, cache, problem, opts.num_splits, self.arch, gpu)
    }

    /// KV-cache attention forward into preallocated outputs: the attention of q (the last
    /// `seqlen_q` positions of each sequence) over the first `seqlens_k[b]` keys and values
    /// of each sequence's cache, into `o` and, if given, `lse` (f32
    /// `[batch, heads, seqlen_q]`, contiguous, natural log), enqueued on `stream`.
    ///
    /// - q `[b, sq, h, d]`, o like q (any strides with a contiguous last dim, as
    ///   [`FlashAttention::forward_into`]); `h % hk == 0`; `d` a multiple of 8 up to 256.
    /// - `k_cache`, `v_cache` `[b, capacity, hk, d]`: any strides with a contiguous last dim,
    ///   e.g. a view of a larger buffer (a cache with room for more sequences or layers).
    ///   A capacity of 0 is allowed.
    /// - `seqlens_k`: i32 `[b]` on the device, the valid keys of each sequence; the kernels
    ///   clamp each value to `[0, capacity]`, so no value makes them read or write out of
    ///   bounds. `None`: every sequence fills its cache (`capacity` keys).
    /// - The causal mask is bottom-right per sequence: query `i` sees keys
    ///   `j <= i + seqlens_k[b] - sq`. A sequence with no visible key (length 0) gets
    ///   `o = 0` and `lse = -inf`.
    /// - Appending this step's keys and values to the cache is the caller's job: copy them
    ///   into the cache views (at positions `seqlens_k[b] - sq ..`) before the call.
    /// - `opts`: how many key-range splits run per (sequence, KV head) ([`KvOptions`]);
    ///   with more than one, f32 scratch of `num_splits * b * h * sq * (d' + 1)` values
    ///   (`d'`: the kernel head dim, `d` rounded up to 32, 64, 96, ...). The runtime keeps
    ///   one such buffer per stream between calls (grown when a call needs more), so a
    ///   decode step allocates nothing; it is freed with the runtime.
    ///
    /// Every check runs before the first launch and fails with a typed
    /// [`FlashError`]; the launches are asynchronous.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_kvcache_into<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        k_cache: &Tensor4<'_, T>,
        v_cache: &Tensor4<'_, T>,
        seqlens_k: Option<&CudaView<'_, i32>>,
        o: &mut Tensor4Mut<'_, T>,
        lse: Option<CudaViewMut<'_, f32>>,
        params: &AttnParams,
        opts: &KvOptions,
    ) -> Result<()> {
        let cache = KvSource::Dense {
            k: k_cache,
            v: v_cache,
        };
        self.run_kvcache(stream, q, cache, seqlens_k, o, lse, params, opts)
    }

    /// The checked KV-cache forward of either cache layout: context checks, the buffers'
    /// guards, the plan, the scratch and the launches.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_kvcache<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        cache: KvSource<'_, '_, T>,
        seqlens_k: Option<&CudaView<'_, i32>>,
        o: &mut Tensor4Mut<'_, T>,
        mut lse: Option<CudaViewMut<'_, f32>>,
        params: &AttnParams,
        opts: &KvOptions,
    ) -> Result<()> {
        let (k_cache, v_cache) = cache.pools();
        let (kn, vn) = cache.names();
        self.check_ctx("stream", stream.context())?;
        self.check_ctx("q", q.view.stream().context())?;
        self.check_ctx(kn, k_cache.view.stream().context())?;
        self.check_ctx(vn, v_cache.view.stream().context())?;
        self.check_ctx("o", o.view.stream().context())?;
        if let Some(s) = seqlens_k {
            self.check_ctx("seqlens_k", s.stream().context())?;
        }
        if let KvSource::Paged(p) = &cache {
            self.check_ctx("block_table", p.block_table.stream().context())?;
        }
        if let Some(l) = &lse {
            self.check_ctx("lse", l.stream().context())?;
        }
        // The guards make `stream` wait for earlier writes (and, for o/lse, reads) of each
        // buffer; dropped after the launches, they record this call's read/write events.
        let (q_ptr, _q_guard) = q.view.device_ptr(stream);
        let (k_ptr, _k_guard) = k_cache.view.device_ptr(stream);
        let (v_ptr, _v_guard) = v_cache.view.device_ptr(stream);
        let (seqlens_desc, _seqlens_guard) = match seqlens_k {
            Some(s) => {
                let (desc, guard) = buf_arg(stream, s);
                (Some(desc), Some(guard))
            }
            None => (None, None),
        };
        let (paged, _table_guard) = match &cache {
            KvSource::Paged(p) => {
                let (block_table, guard) = buf_arg(stream, &p.block_table);
                let shape = p.table_shape;
                (Some(PagedDesc { block_table, shape }), Some(guard))
            }
            KvSource::Dense { .. } => (None, None),
        };
        let o_desc = o.desc(0);
        let (o_ptr, _o_guard) = o.view.device_ptr_mut(stream);
        let (lse_desc, _lse_guard) = lse_arg(stream, &mut lse);
        let (alibi, _alibi_guard) = self.alibi_arg(stream, params)?;
        let args = KvArgs {
            q: q.desc(q_ptr),
            k: k_cache.desc(k_ptr),
            v: v_cache.desc(v_ptr),
            o: o_desc.with_ptr(o_ptr),
            lse: lse_desc,
            seqlens_k: seqlens_desc,
            params: *params,
            alibi,
            num_splits: opts.num_splits,
            paged,
        };
        let gpu = self.gpu_fill();
        let mut plan = plan_kvcache(&args, self.arch, gpu)?;
        if plan.is_noop() {
            return Ok(());
        }
        // Load (JIT) every kernel first: a rejected PTX then launches nothing.
        let fs = plan
            .launches()
            .map(|l| self.function(&l.spec))
            .collect::<Result<Vec<CudaFunction>>>()?;
        // Scratch only when the keys are split: one f32 buffer per stream, kept by the
        // runtime between calls (grown when a call needs more: the old one is then freed
        // by cudarc after its recorded uses, stream-ordered), o_accum then lse_accum. Calls
        // on one stream are ordered by the stream, so reuse needs no event; the lock is
        // held until both launches are enqueued. Under stream capture, a buffer of the
        // call's own (`capturing`), freed in stream order after it.
        let need = plan.o_accum_len + plan.lse_accum_len;
        let mut cache = lock(&self.kv_scratch);
        let key = stream.cu_stream() as usize;
        let mut own = None;
        let _partials_guard = match need {
            0 => None,
            _ => {
                let buf = if capturing(stream)? {
                    own.insert(scratch(stream, need)?)
                } else {
                    if cache.get(&key).is_none_or(|s| s.len() < need) {
                        cache.insert(key, scratch(stream, need)?);
                    }
                    cache.get_mut(&key).expect("inserted above")
                };
                let (ptr, guard) = buf.device_ptr_mut(stream);
                let o_len = plan.o_accum_len;
                plan.bind_scratch(
                    BufDesc { ptr, len: o_len },
                    BufDesc {
                        ptr: ptr + 4 * o_len as u64,
                        len: plan.lse_accum_len,
                    },
                )?;
                Some(guard)
            }
        };
        if !plan.scratch_bound {
            return Err(FlashError::Internal(
                "KV-cache plan launched without its scratch".into(),
            ));
        }
        for (f, l) in fs.iter().zip(plan.launches()) {
            // SAFETY:
            // - `f` is `l.spec`'s entry; `l` comes from `plan_kvcache`, which bound its
            //   parameters in the order and PTX types of `abi::params(l.spec.pass)`.
            // - Every pointer comes from a live cudarc view or slice of this context (checked
            //   above); `plan_kvcache` proved that q, the caches and o stay inside their views
            //   (or the page pools) with 16-byte aligned bases and strides, that o's
            //   elements are disjoint, that lse holds b*h*sq f32, seqlens_k b i32 and a
            //   block table b*max_pages i32 (4-byte aligned); the kernels clamp each
            //   seqlens_k value to [0, capacity] (at most MAX_CAPACITY), so no value reads
            //   past a cache.
            //   `bind_scratch` checked that the partial buffers hold num_splits*b*h*sq*
            //   kernel_head_dim and num_splits*b*h*sq f32, or passed 0 with one split (the
            //   split pass then writes o and lse itself and no combine runs).
            // - Paged: the kernel reads table row `batch < b` only, each index clamped to
            //   [0, max_pages) and each entry to [0, num_pages); a run of copies stays in
            //   one page (power-of-two steps and pages, asserted by the generator); the
            //   pools' page and row strides are below 2^31 elements (checked), so the
            //   kernel's 32-bit byte products do not wrap; a null table is passed only
            //   with capacity 0, when nothing reads it.
            // - q, the caches (or pools and table) and seqlens_k are shared borrows, only
            //   read; o and lse are exclusive borrows; the scratch is this stream's, used
            //   by calls on this stream only (in stream order) and locked until both
            //   launches are enqueued, so nothing else aliases them.
            // - The launches are stream-ordered: the combine pass reads the partials after
            //   the split pass wrote every element of them.
            // - The guards above outlive the launches; the scratch outlives them in the
            //   runtime's cache (a replaced buffer is freed stream-ordered, after them).
            unsafe { self.launch_unchecked(stream, f, l) }?;
        }
        Ok(())
    }
}
