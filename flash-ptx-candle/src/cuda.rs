//! The CUDA op: flash-ptx's forward in `cuda_fwd`, its backward in `bwd`, on candle's
//! context and stream. The runtime (one per CUDA context) generates and caches the PTX.

use std::sync::{Arc, Mutex, OnceLock};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaStream};
use candle_core::cuda_backend::{CudaDType, CudaStorage};
use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, CustomOp3, DType, Error, Layout, Result, Shape, Storage, Tensor};
use flash_runtime::half::{bf16, f16};
use flash_runtime::{
    Alibi, AttnParams, BwdInputs, BwdOptions, Element, FlashAttention, FlashError, Tensor4,
};

use crate::FlashParams;
use crate::checks::kernel_ready;

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

/// The tensors as the op takes them (strides the kernels read, slopes in a buffer of
/// their own) and the op applied.
pub(crate) fn flash_attn(q: &Tensor, k: &Tensor, v: &Tensor, p: &FlashParams) -> Result<Tensor> {
    let (q, k, v) = (kernel_ready(q)?, kernel_ready(k)?, kernel_ready(v)?);
    let mut p = p.clone();
    if let Some(s) = &p.alibi_slopes {
        // the runtime binds the slopes' whole buffer: a fresh contiguous copy
        p.alibi_slopes = Some(s.copy()?);
    }
    let op = FlashOp {
        params: p,
        lse: Mutex::new(None),
    };
    q.apply_op3_arc(&k, &v, Arc::new(Box::new(op)))
}

/// One attention call: its parameters and, after the forward, its log-sum-exp (f32 `[b,
/// h, sq]`) for the backward.
struct FlashOp {
    params: FlashParams,
    lse: Mutex<Option<CudaSlice<f32>>>,
}

/// A tensor view of candle storage `s` under layout `l` (a 4D layout, head dim
/// contiguous: [`kernel_ready`]).
fn view<'a, T: CudaDType>(s: &'a CudaStorage, l: &Layout) -> Result<Tensor4<'a, T>> {
    let slice = s.as_cuda_slice::<T>()?.slice(l.start_offset()..);
    let shape: [usize; 4] = l
        .dims()
        .try_into()
        .map_err(|_| Error::Msg("flash-ptx: rank 4".into()))?;
    let strides: [usize; 4] = l
        .stride()
        .try_into()
        .map_err(|_| Error::Msg("flash-ptx: rank 4".into()))?;
    Ok(Tensor4::strided(slice, shape, strides))
}

/// The CUDA storage of `t` (with its layout), read-locked.
fn cuda_of(t: &Tensor) -> Result<(candle_core::StorageRef<'_>, &Layout)> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cuda(_) => Ok((s, l)),
        _ => Err(Error::Msg("flash-ptx: expected a CUDA tensor".into())),
    }
}

fn as_cuda<'a>(s: &'a candle_core::StorageRef<'_>) -> &'a CudaStorage {
    match &**s {
        Storage::Cuda(c) => c,
        _ => unreachable!("cuda_of checked the storage"),
    }
}

impl FlashOp {
    /// The runtime's parameters with the slopes bound, handed to `f`.
    fn with_params<R>(&self, f: impl FnOnce(&AttnParams) -> Result<R>) -> Result<R> {
        let base = self.params.attn_params()?;
        match &self.params.alibi_slopes {
            None => f(&base),
            Some(slopes) => {
                let (s, _) = cuda_of(slopes)?;
                let buf = as_cuda(&s).as_cuda_slice::<f32>()?;
                let alibi = match slopes.rank() {
                    1 => Alibi::per_head(buf),
                    _ => Alibi::per_batch_head(buf),
                };
                f(&base.with_alibi(alibi))
            }
        }
    }

    fn fwd<T: CudaDType + Element>(
        &self,
        (s1, l1): (&CudaStorage, &Layout),
        (s2, l2): (&CudaStorage, &Layout),
        (s3, l3): (&CudaStorage, &Layout),
    ) -> Result<(CudaStorage, Shape)> {
        let dev = s1.device().clone();
        let stream = dev.cuda_stream();
        let rt = runtime_for(&stream)?;
        let (q, k, v) = (view::<T>(s1, l1)?, view::<T>(s2, l2)?, view::<T>(s3, l3)?);
        let out = self.with_params(|p| rt.forward(&stream, &q, &k, &v, p).map_err(wrap))?;
        *self.lse.lock().unwrap_or_else(|p| p.into_inner()) = Some(out.lse);
        Ok((
            CudaStorage::wrap_cuda_slice(out.o, dev),
            Shape::from(l1.dims()),
        ))
    }

    fn bwd_t<T: CudaDType + Element>(
        &self,
        [q, k, v, o, d_o]: [&Tensor; 5],
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d_o = kernel_ready(d_o)?;
        let lse = self.lse.lock().unwrap_or_else(|p| p.into_inner());
        let Some(lse) = lse.as_ref() else {
            return Err(Error::Msg(
                "flash-ptx: backward before the forward ran".into(),
            ));
        };
        let (sq, lq) = cuda_of(q)?;
        let (sk, lk) = cuda_of(k)?;
        let (sv, lv) = cuda_of(v)?;
        let (so, lo) = cuda_of(o)?;
        let (sd, ld) = cuda_of(&d_o)?;
        let dev = as_cuda(&sq).device().clone();
        let stream = dev.cuda_stream();
        let rt = runtime_for(&stream)?;
        let tq = view::<T>(as_cuda(&sq), lq)?;
        let tk = view::<T>(as_cuda(&sk), lk)?;
        let tv = view::<T>(as_cuda(&sv), lv)?;
        let to = view::<T>(as_cuda(&so), lo)?;
        let td = view::<T>(as_cuda(&sd), ld)?;
        let lse_view = lse.as_view();
        let inputs = BwdInputs {
            q: &tq,
            k: &tk,
            v: &tv,
            o: &to,
            lse: &lse_view,
            d_o: &td,
        };
        let opts = match self.params.deterministic {
            true => BwdOptions::deterministic(),
            false => BwdOptions::new(),
        };
        let g = self.with_params(|p| rt.backward(&stream, inputs, p, &opts).map_err(wrap))?;
        let tensor = |slice: CudaSlice<T>, shape: &[usize]| {
            let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
            Tensor::from_storage(storage, shape, BackpropOp::none(), false)
        };
        let (qs, ks) = (q.dims().to_vec(), k.dims().to_vec());
        Ok((
            Some(tensor(g.dq, &qs)),
            Some(tensor(g.dk, &ks)),
            Some(tensor(g.dv, &ks)),
        ))
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
            "flash-ptx: the kernel op runs on CUDA tensors (flash_attn computes CPU tensors \
             with flash_ptx_candle::reference::attention)"
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
        let args = ((s1, l1), (s2, l2), (s3, l3));
        match s1.dtype() {
            DType::F16 => self.fwd::<f16>(args.0, args.1, args.2),
            DType::BF16 => self.fwd::<bf16>(args.0, args.1, args.2),
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
