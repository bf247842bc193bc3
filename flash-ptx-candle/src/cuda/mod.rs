//! The CUDA op: flash-ptx's forwards in `cuda_fwd`, its backwards in `bwd`, on candle's
//! context and stream. The runtime (one per CUDA context) generates and caches the PTX.
//! One op type serves every call; [`Kind`] says which (dense, varlen, KV cache, paged)
//! and holds the extra tensors (offsets, key counts, page table).

mod run;

use std::sync::{Arc, Mutex, OnceLock};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaStream, CudaView};
use candle_core::cuda_backend::{CudaDType, CudaStorage};
use candle_core::{
    CpuStorage, CustomOp3, DType, Error, Layout, Result, Shape, Storage, StorageRef, Tensor,
};
use flash_runtime::half::{bf16, f16};
use flash_runtime::{FlashAttention, FlashError, Tensor4};

use crate::checks::kernel_ready;
use crate::{FlashParams, Varlen};

/// The runtimes made so far, one per CUDA context (each keeps its context alive).
static RUNTIMES: OnceLock<Mutex<Vec<Arc<FlashAttention>>>> = OnceLock::new();

/// The runtime of `stream`'s context, made on first use.
fn runtime_for(stream: &Arc<CudaStream>) -> Result<Arc<FlashAttention>> {
    let ctx = stream.context();
    let mut all = RUNTIMES
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = all.iter().find(|rt| rt.context().cu_ctx() == ctx.cu_ctx()) {
        return Ok(rt.clone());
    }
    let rt = Arc::new(FlashAttention::new(ctx.clone()).map_err(wrap)?);
    all.push(rt.clone());
    Ok(rt)
}

fn wrap(e: FlashError) -> Error {
    Error::Msg(format!("flash-ptx: {e}"))
}

/// Which attention one op computes, with the tensors it needs besides its three inputs.
enum Kind {
    /// q, k, v `[b, s, heads, d]`.
    Dense,
    /// q, k, v `[1, total, heads, d]` (the packed rows under a batch dim of 1).
    Varlen(Varlen),
    /// q and the caches (`table: None`) or the page pools (`table: Some`); forward only.
    KvCache {
        seqlens_k: Option<Tensor>,
        table: Option<Tensor>,
    },
}

/// One attention call: its kind, its parameters and, after the forward, its log-sum-exp
/// (f32) for the backward.
struct FlashOp {
    kind: Kind,
    params: FlashParams,
    lse: Mutex<Option<CudaSlice<f32>>>,
}

/// Applies the op of `kind` to q, k, v (strides the kernels read, every extra tensor and
/// the slopes contiguous: the runtime binds their whole buffers).
fn apply(kind: Kind, q: &Tensor, k: &Tensor, v: &Tensor, p: &FlashParams) -> Result<Tensor> {
    let (q, k, v) = (kernel_ready(q)?, kernel_ready(k)?, kernel_ready(v)?);
    let mut params = p.clone();
    if let Some(s) = &p.alibi_slopes {
        params.alibi_slopes = Some(s.copy()?);
    }
    let op = FlashOp {
        kind,
        params,
        lse: Mutex::new(None),
    };
    q.apply_op3_arc(&k, &v, Arc::new(Box::new(op)))
}

pub(crate) fn flash_attn(q: &Tensor, k: &Tensor, v: &Tensor, p: &FlashParams) -> Result<Tensor> {
    apply(Kind::Dense, q, k, v, p)
}

pub(crate) fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    vl: &Varlen,
    p: &FlashParams,
) -> Result<Tensor> {
    let vl = Varlen {
        cu_seqlens_q: vl.cu_seqlens_q.contiguous()?,
        cu_seqlens_k: vl.cu_seqlens_k.contiguous()?,
        ..vl.clone()
    };
    let u = |t: &Tensor| t.unsqueeze(0);
    apply(Kind::Varlen(vl), &u(q)?, &u(k)?, &u(v)?, p)?.squeeze(0)
}

pub(crate) fn flash_attn_kvcache(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_k: Option<&Tensor>,
    table: Option<&Tensor>,
    p: &FlashParams,
) -> Result<Tensor> {
    let kind = Kind::KvCache {
        seqlens_k: seqlens_k.map(Tensor::contiguous).transpose()?,
        table: table.map(Tensor::contiguous).transpose()?,
    };
    apply(kind, q, k, v, p)
}

/// The CUDA storage behind a read-locked storage reference.
fn cuda<'a>(s: &'a StorageRef<'_>) -> Result<&'a CudaStorage> {
    match &**s {
        Storage::Cuda(c) => Ok(c),
        _ => Err(Error::Msg("flash-ptx: expected a CUDA tensor".into())),
    }
}

/// A tensor view of candle storage `s` under layout `l` (a 4D layout, head dim
/// contiguous: [`kernel_ready`]).
fn view<'a, T: CudaDType>(s: &'a CudaStorage, l: &Layout) -> Result<Tensor4<'a, T>> {
    let slice = s.as_cuda_slice::<T>()?.slice(l.start_offset()..);
    let rank4 = || Error::Msg("flash-ptx: rank 4".into());
    let shape: [usize; 4] = l.dims().try_into().map_err(|_| rank4())?;
    let strides: [usize; 4] = l.stride().try_into().map_err(|_| rank4())?;
    Ok(Tensor4::strided(slice, shape, strides))
}

/// `f` on the i32 device view of a contiguous u32 or i32 tensor `t` (u32 read as i32:
/// the kernels clamp every value, so any bit pattern is safe).
fn with_i32<R>(t: &Tensor, f: impl FnOnce(CudaView<'_, i32>) -> Result<R>) -> Result<R> {
    let (s, l) = t.storage_and_layout();
    let c = cuda(&s)?;
    let (start, n) = (l.start_offset(), l.shape().elem_count());
    match t.dtype() {
        DType::I32 => f(c.as_cuda_slice::<i32>()?.slice(start..start + n)),
        DType::U32 => {
            let view = c.as_cuda_slice::<u32>()?.slice(start..start + n);
            // SAFETY: u32 and i32 have one size and every bit pattern is a valid i32.
            let as_i32 = unsafe { view.transmute::<i32>(n) };
            f(as_i32.ok_or_else(|| Error::Msg("flash-ptx: index view".into()))?)
        }
        other => Err(Error::Msg(format!(
            "flash-ptx: index tensor of dtype {other:?}: expected u32 or i32"
        ))),
    }
}

/// [`with_i32`] for an optional tensor.
fn with_opt_i32<R>(
    t: Option<&Tensor>,
    f: impl FnOnce(Option<&CudaView<'_, i32>>) -> Result<R>,
) -> Result<R> {
    match t {
        None => f(None),
        Some(t) => with_i32(t, |v| f(Some(&v))),
    }
}

impl CustomOp3 for FlashOp {
    fn name(&self) -> &'static str {
        "flash-ptx-attention"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(Error::Msg(
            "flash-ptx: the kernel op runs on CUDA tensors (CPU tensors take the \
             flash_ptx_candle::reference path)"
                .into(),
        ))
    }

    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let args = [(s1, l1), (s2, l2), (s3, l3)];
        match s1.dtype() {
            DType::F16 => self.fwd::<f16>(args),
            DType::BF16 => self.fwd::<bf16>(args),
            other => Err(Error::Msg(format!(
                "flash-ptx: dtype {other:?}: the kernels take f16 or bf16 (convert with \
                 `to_dtype`)"
            ))),
        }
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        d_o: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        match q.dtype() {
            DType::F16 => self.bwd_t::<f16>([q, k, v, o, d_o]),
            DType::BF16 => self.bwd_t::<bf16>([q, k, v, o, d_o]),
            other => Err(Error::Msg(format!(
                "flash-ptx: no backward for dtype {other:?}"
            ))),
        }
    }
}
