//! Attention from candle's own ops (matmul, softmax, masks as tensors), in f32: the
//! op's semantics spelled out, the path CPU tensors take, and the GPU tests' reference.
//! It materialises the `[b, h, sq, sk]` scores, so its memory is O(sq * sk).

use candle_core::{D, DType, Device, Result, Tensor};

use crate::FlashParams;
use crate::checks::Dims;

/// Attention of `q [b, sq, h, d]` over `k, v [b, sk, hk, d]` under `p`, computed with
/// candle's ops in f32 and returned in q's dtype; differentiable through candle's autograd.
/// A query that sees no key gets zeros (as the kernels).
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, p: &FlashParams) -> Result<Tensor> {
    let dims = crate::checks::inputs(q, k, v, p)?;
    let Dims {
        b,
        sq,
        sk,
        h,
        hk,
        d,
    } = dims;
    let (left, right) = p.window()?;
    let f = |t: &Tensor| t.to_dtype(DType::F32)?.transpose(1, 2); // [b, heads, s, d]
    let (qf, kf, vf) = (f(q)?, f(k)?, f(v)?);
    // GQA: each kv head serves h / hk consecutive query heads
    let expand = |t: Tensor| -> Result<Tensor> {
        let g = h / hk;
        t.unsqueeze(2)?
            .expand((b, hk, g, sk, d))?
            .reshape((b, h, sk, d))
    };
    let (kf, vf) = (expand(kf)?, expand(vf)?);
    let scale = f64::from(p.scale_for(d));
    let mut s = (qf.contiguous()?.matmul(&kf.t()?.contiguous()?)? * scale)?;
    if let Some(cap) = p.softcap {
        let cap = f64::from(cap);
        s = ((s / cap)?.tanh()? * cap)?;
    }
    let dev = q.device();
    if let Some(slopes) = &p.alibi_slopes {
        let slopes = slopes.to_dtype(DType::F32)?;
        let slopes = match slopes.rank() {
            1 => slopes.reshape((1, h, 1, 1))?,
            _ => slopes.reshape((b, h, 1, 1))?,
        };
        let dist = distances(sq, sk, dev)?.reshape((1, 1, sq, sk))?;
        s = s.broadcast_sub(&dist.broadcast_mul(&slopes)?)?;
    }
    let visible = visibility(sq, sk, (left, right), dev)?
        .reshape((1, 1, sq, sk))?
        .broadcast_as((b, h, sq, sk))?;
    let neg_inf = Tensor::full(f32::NEG_INFINITY, (b, h, sq, sk), dev)?;
    let s = visible.where_cond(&s, &neg_inf)?;
    // softmax with rows that see no key left at zero
    let m = s.max_keepdim(D::Minus1)?.maximum(-1e30f64)?;
    let e = s.broadcast_sub(&m)?.exp()?;
    let l = e.sum_keepdim(D::Minus1)?.maximum(1f64)?; // rows with keys sum to >= 1; 1 keeps empty rows at 0 (no huge 1/l)
    let o = e.matmul(&vf.contiguous()?)?.broadcast_div(&l)?;
    o.transpose(1, 2)?.contiguous()?.to_dtype(q.dtype())
}

/// `|i + sk - sq - j|` for every (query i, key j), f32 `[sq, sk]`.
fn distances(sq: usize, sk: usize, dev: &Device) -> Result<Tensor> {
    let shift = sk as i64 - sq as i64;
    let d: Vec<f32> = (0..sq as i64)
        .flat_map(|i| (0..sk as i64).map(move |j| (i + shift - j).abs() as f32))
        .collect();
    Tensor::from_vec(d, (sq, sk), dev)
}

/// 1 where query i sees key j under the window `(left, right)` (-1: unbounded),
/// u8 `[sq, sk]`.
fn visibility(sq: usize, sk: usize, (left, right): (i32, i32), dev: &Device) -> Result<Tensor> {
    let shift = sk as i64 - sq as i64;
    let m: Vec<u8> = (0..sq as i64)
        .flat_map(|i| {
            (0..sk as i64).map(move |j| {
                let diag = i + shift;
                let after = left < 0 || j >= diag - i64::from(left);
                let before = right < 0 || j <= diag + i64::from(right);
                u8::from(after && before)
            })
        })
        .collect();
    Tensor::from_vec(m, (sq, sk), dev)
}
