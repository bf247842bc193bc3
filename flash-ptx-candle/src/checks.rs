//! The checks every call makes before it touches a device: ranks, dtypes, devices and
//! the shapes' agreement, each failing with a message that says what to change.

use candle_core::{DType, Error, Result, Tensor};

use crate::FlashParams;

/// The problem's sizes: q `[b, sq, h, d]`, k and v `[b, sk, hk, d]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Batch.
    pub b: usize,
    /// Queries per sequence.
    pub sq: usize,
    /// Keys per sequence.
    pub sk: usize,
    /// Query heads.
    pub h: usize,
    /// Key/value heads (`h % hk == 0`).
    pub hk: usize,
    /// Head dim.
    pub d: usize,
}

pub(crate) fn err(msg: String) -> Error {
    Error::Msg(format!("flash-ptx: {msg}"))
}

/// Checks q, k, v (and the ALiBi slopes in `p`) and returns their sizes.
pub fn inputs(q: &Tensor, k: &Tensor, v: &Tensor, p: &FlashParams) -> Result<Dims> {
    let dims = tensors(q, k, v, true)?;
    slopes(p, dims.b, dims.h, q)?;
    Ok(dims)
}

/// Ranks, devices, dtypes and shapes of q, k, v; k's batch must be q's when
/// `same_batch` (paged pools have pages there instead).
pub(crate) fn tensors(q: &Tensor, k: &Tensor, v: &Tensor, same_batch: bool) -> Result<Dims> {
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        if t.rank() != 4 {
            return Err(err(format!(
                "{name} has shape {:?}: expected rank 4, [batch, seqlen, heads, head_dim]",
                t.dims()
            )));
        }
        same_device(name, t, q)?;
    }
    if k.dtype() != q.dtype() || v.dtype() != q.dtype() {
        return Err(err(format!(
            "dtypes differ: q {:?}, k {:?}, v {:?}",
            q.dtype(),
            k.dtype(),
            v.dtype()
        )));
    }
    if !matches!(q.dtype(), DType::F16 | DType::BF16 | DType::F32) {
        return Err(err(format!(
            "dtype {:?}: the kernels take f16 or bf16 (convert with `to_dtype`)",
            q.dtype()
        )));
    }
    let (b, sq, h, d) = q.dims4()?;
    let (kb, sk, hk, kd) = k.dims4()?;
    if k.dims() != v.dims() {
        return Err(err(format!(
            "k {:?} and v {:?} differ in shape",
            k.dims(),
            v.dims()
        )));
    }
    if (same_batch && kb != b) || kd != d {
        return Err(err(format!(
            "q {:?} and k {:?}: batch and head_dim must agree ([b, s, h, d])",
            q.dims(),
            k.dims()
        )));
    }
    if hk == 0 || h % hk != 0 {
        return Err(err(format!(
            "{h} query heads over {hk} key/value heads: the query heads must be a multiple \
             of the kv heads (GQA)"
        )));
    }
    Ok(Dims {
        b,
        sq,
        sk,
        h,
        hk,
        d,
    })
}

/// The ALiBi slopes in `p` (if any): f32 `[h]` or `[b, h]` on q's device.
pub(crate) fn slopes(p: &FlashParams, b: usize, h: usize, q: &Tensor) -> Result<()> {
    if let Some(s) = &p.alibi_slopes {
        if s.dtype() != DType::F32 {
            return Err(err(format!(
                "ALiBi slopes are {:?}: expected f32",
                s.dtype()
            )));
        }
        if s.dims() != [h] && s.dims() != [b, h] {
            return Err(err(format!(
                "ALiBi slopes of shape {:?}: expected [{h}] (per head) or [{b}, {h}] (per \
                 batch and head)",
                s.dims()
            )));
        }
        same_device("ALiBi slopes", s, q)?;
    }
    Ok(())
}

/// An index tensor of the KV-cache and varlen calls: u32 or i32 (values up to 2^31 - 1;
/// the kernels clamp whatever the device holds), of shape `dims`, on q's device.
pub(crate) fn index(name: &str, t: &Tensor, dims: &[usize], q: &Tensor) -> Result<()> {
    if !matches!(t.dtype(), DType::U32 | DType::I32) {
        return Err(err(format!(
            "{name} is {:?}: expected u32 or i32",
            t.dtype()
        )));
    }
    if t.dims() != dims {
        return Err(err(format!(
            "{name} has shape {:?}: expected {dims:?}",
            t.dims()
        )));
    }
    same_device(name, t, q)
}

/// `t` is on q's device.
pub(crate) fn same_device(name: &str, t: &Tensor, q: &Tensor) -> Result<()> {
    match t.device().same_device(q.device()) {
        true => Ok(()),
        false => Err(err(format!(
            "{name} is on {:?}, q on {:?}",
            t.device(),
            q.device()
        ))),
    }
}

/// `t` as the kernels can read it: the head dim contiguous and no broadcast (stride 0)
/// dimension; a copy only where `t` is not.
pub fn kernel_ready(t: &Tensor) -> Result<Tensor> {
    let strides = t.stride();
    let broadcast = t.dims().iter().zip(strides).any(|(&n, &s)| n > 1 && s == 0);
    match strides.last() == Some(&1) && !broadcast {
        true => Ok(t.clone()),
        false => t.contiguous(),
    }
}
