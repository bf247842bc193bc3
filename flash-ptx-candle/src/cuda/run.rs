//! The op's forward and backward: each [`Kind`] to its flash-runtime call.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::CudaSlice;
use candle_core::cuda_backend::{CudaDType, CudaStorage};
use candle_core::op::BackpropOp;
use candle_core::{Error, Layout, Result, Shape, Storage, Tensor};
use flash_runtime::{
    Alibi, AttnParams, BwdInputs, BwdOptions, Element, KvOptions, PagedKv, Varlen as RtVarlen,
};

use super::{FlashOp, Kind, cuda, runtime_for, view, with_i32, with_opt_i32, wrap};
use crate::Varlen;
use crate::checks::kernel_ready;

/// `f` on the runtime's view of the varlen offsets.
fn with_offsets<R>(vl: &Varlen, f: impl FnOnce(&RtVarlen<'_>) -> Result<R>) -> Result<R> {
    with_i32(&vl.cu_seqlens_q, |cq| {
        with_i32(&vl.cu_seqlens_k, |ck| {
            f(&RtVarlen::new(cq, ck, vl.max_seqlen_q, vl.max_seqlen_k))
        })
    })
}

impl FlashOp {
    /// The runtime's parameters with the slopes bound, handed to `f`.
    fn with_params<R>(&self, f: impl FnOnce(&AttnParams) -> Result<R>) -> Result<R> {
        let base = self.params.attn_params()?;
        match &self.params.alibi_slopes {
            None => f(&base),
            Some(slopes) => {
                let (s, _) = slopes.storage_and_layout();
                let buf = cuda(&s)?.as_cuda_slice::<f32>()?;
                let alibi = match slopes.rank() {
                    1 => Alibi::per_head(buf),
                    _ => Alibi::per_batch_head(buf),
                };
                f(&base.with_alibi(alibi))
            }
        }
    }

    pub(super) fn fwd<T: CudaDType + Element>(
        &self,
        [(s1, l1), (s2, l2), (s3, l3)]: [(&CudaStorage, &Layout); 3],
    ) -> Result<(CudaStorage, Shape)> {
        let dev = s1.device().clone();
        let stream = dev.cuda_stream();
        let rt = runtime_for(&stream)?;
        let (q, k, v) = (view::<T>(s1, l1)?, view::<T>(s2, l2)?, view::<T>(s3, l3)?);
        let out = self.with_params(|p| match &self.kind {
            Kind::Dense => rt.forward(&stream, &q, &k, &v, p).map_err(wrap),
            Kind::Varlen(vl) => with_offsets(vl, |vl| {
                rt.forward_varlen(&stream, (&q, &k, &v), vl, p)
                    .map_err(wrap)
            }),
            Kind::KvCache { seqlens_k, table } => {
                let opts = match self.params.num_splits {
                    Some(n) => KvOptions::with_splits(n),
                    None => KvOptions::new(),
                };
                with_opt_i32(seqlens_k.as_ref(), |lens| match table {
                    None => rt
                        .forward_kvcache(&stream, &q, &k, &v, lens, p, &opts)
                        .map_err(wrap),
                    Some(table) => with_i32(table, |tv| {
                        let cache = PagedKv::new(k, v, tv, [table.dim(0)?, table.dim(1)?]);
                        rt.forward_kvcache_paged(&stream, &q, &cache, lens, p, &opts)
                            .map_err(wrap)
                    }),
                })
            }
        })?;
        if matches!(self.kind, Kind::Dense | Kind::Varlen(_)) {
            *self.lse.lock().unwrap_or_else(|p| p.into_inner()) = Some(out.lse);
        }
        Ok((
            CudaStorage::wrap_cuda_slice(out.o, dev),
            Shape::from(l1.dims()),
        ))
    }

    pub(super) fn bwd_t<T: CudaDType + Element>(
        &self,
        [q, k, v, o, d_o]: [&Tensor; 5],
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        if matches!(self.kind, Kind::KvCache { .. }) {
            return Err(Error::Msg(
                "flash-ptx: KV-cache and paged attention have no backward (they serve \
                 inference); train with flash_attn or flash_attn_varlen, or detach the \
                 inputs"
                    .into(),
            ));
        }
        let d_o = kernel_ready(d_o)?;
        let lse = self.lse.lock().unwrap_or_else(|p| p.into_inner());
        let Some(lse) = lse.as_ref() else {
            return Err(Error::Msg(
                "flash-ptx: backward before the forward ran".into(),
            ));
        };
        let storages = [q, k, v, o, &d_o].map(|t| t.storage_and_layout());
        let mut views = Vec::with_capacity(5);
        for (s, l) in &storages {
            views.push(view::<T>(cuda(s)?, l)?);
        }
        let dev = cuda(&storages[0].0)?.device().clone();
        let stream = dev.cuda_stream();
        let rt = runtime_for(&stream)?;
        let lse_view = lse.as_view();
        let inputs = BwdInputs {
            q: &views[0],
            k: &views[1],
            v: &views[2],
            o: &views[3],
            lse: &lse_view,
            d_o: &views[4],
        };
        let opts = match self.params.deterministic {
            true => BwdOptions::deterministic(),
            false => BwdOptions::new(),
        };
        let g = self.with_params(|p| match &self.kind {
            Kind::Varlen(vl) => with_offsets(vl, |vl| {
                rt.backward_varlen(&stream, inputs, vl, p, &opts)
                    .map_err(wrap)
            }),
            _ => rt.backward(&stream, inputs, p, &opts).map_err(wrap),
        })?;
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
