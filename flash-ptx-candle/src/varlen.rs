//! Packed variable-length batches (FlashAttention's varlen API, candle-flash-attn's
//! `flash_attn_varlen`): [`Varlen`] and [`flash_attn_varlen`], with a backward.

use candle_core::{DType, Device, Result, Tensor};

use crate::FlashParams;
use crate::checks::{self, err};

/// The offsets of a packed batch, candle-flash-attn's `seqlens_q` / `seqlens_k`:
/// `cu_seqlens_q` and `cu_seqlens_k`, u32 (or i32) `[batch + 1]` on q's device, sequence
/// `b` in rows `cu[b] .. cu[b + 1]`; and the longest query and key sequences.
///
/// The offsets stay on the device: the kernels clamp them to the tensors (no value makes
/// them read or write outside q, k, v or o), but offsets that are not non-decreasing from
/// 0 give meaningless values, and `max_seqlen_q` / `max_seqlen_k` must be at least every
/// sequence's length (longer sequences are cut there). The CPU path reads them and
/// rejects both.
#[derive(Clone, Debug)]
pub struct Varlen {
    /// `[batch + 1]` query offsets.
    pub cu_seqlens_q: Tensor,
    /// `[batch + 1]` key offsets.
    pub cu_seqlens_k: Tensor,
    /// At least the longest query sequence.
    pub max_seqlen_q: usize,
    /// At least the longest key sequence.
    pub max_seqlen_k: usize,
}

impl Varlen {
    /// The offsets and longest sequences (see the type's docs).
    pub fn new(cu_seqlens_q: &Tensor, cu_seqlens_k: &Tensor, max_q: usize, max_k: usize) -> Self {
        Varlen {
            cu_seqlens_q: cu_seqlens_q.clone(),
            cu_seqlens_k: cu_seqlens_k.clone(),
            max_seqlen_q: max_q,
            max_seqlen_k: max_k,
        }
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.cu_seqlens_q
            .dims()
            .first()
            .map_or(0, |n| n.saturating_sub(1))
    }
}

/// Attention of each sequence of a packed batch: `q [total_q, h, d]` over `k, v [total_k,
/// hk, d]` (`h % hk == 0`), sequence `b` its own problem (causal and windows bottom-right
/// within it; ALiBi slopes `[h]` or `[batch, h]`); `o` like q, zero in rows of no
/// sequence and for queries that see no key. Tracked by autograd (flash-ptx's varlen
/// backward on CUDA). Tensors on other devices take [`attention_varlen`].
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    varlen: &Varlen,
    p: &FlashParams,
) -> Result<Tensor> {
    check(q, k, v, varlen, p)?;
    p.attn_params()?;
    if q.device().is_cuda() {
        #[cfg(feature = "cuda")]
        return crate::cuda::flash_attn_varlen(q, k, v, varlen, p);
        #[cfg(not(feature = "cuda"))]
        return Err(crate::no_cuda());
    }
    attention_varlen(q, k, v, varlen, p)
}

/// Ranks, shapes, offsets and slopes of a varlen call.
fn check(q: &Tensor, k: &Tensor, v: &Tensor, vl: &Varlen, p: &FlashParams) -> Result<()> {
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        if t.rank() != 3 {
            return Err(err(format!(
                "{name} has shape {:?}: a packed batch is rank 3, [total_seqlen, heads, \
                 head_dim]",
                t.dims()
            )));
        }
    }
    let u = |t: &Tensor| t.unsqueeze(0);
    let dims = checks::tensors(&u(q)?, &u(k)?, &u(v)?, true)?;
    let n = vl.cu_seqlens_q.dims().first().copied().unwrap_or(0);
    if n == 0 {
        return Err(err(
            "cu_seqlens_q is empty: it holds batch + 1 offsets, starting with 0".into(),
        ));
    }
    checks::index("cu_seqlens_q", &vl.cu_seqlens_q, &[n], q)?;
    checks::index("cu_seqlens_k", &vl.cu_seqlens_k, &[n], q)?;
    checks::slopes(p, n - 1, dims.h, q)
}

/// The offsets on the host, checked: `[batch + 1]`, non-decreasing from 0, at most
/// `total`, each sequence at most `max` long.
fn host_offsets(name: &str, cu: &Tensor, total: usize, max: usize) -> Result<Vec<usize>> {
    let raw: Vec<i64> = cu
        .to_device(&Device::Cpu)?
        .to_dtype(DType::I64)?
        .to_vec1()?;
    let ok = raw.first() == Some(&0) && raw.windows(2).all(|w| w[0] <= w[1]);
    let last = raw.last().copied().unwrap_or(0);
    if !ok || last > total as i64 {
        return Err(err(format!(
            "{name} {raw:?}: offsets must be non-decreasing from 0 and end at most at the \
             packed length {total}"
        )));
    }
    if let Some(w) = raw.windows(2).find(|w| w[1] - w[0] > max as i64) {
        return Err(err(format!(
            "{name}: a sequence of {} rows is longer than its max_seqlen {max}",
            w[1] - w[0]
        )));
    }
    Ok(raw.into_iter().map(|x| x as usize).collect())
}

/// [`flash_attn_varlen`]'s semantics from candle ops (each sequence through
/// [`reference::attention`](crate::reference::attention)); the offsets are read to the
/// host and checked. Differentiable through candle's autograd.
pub fn attention_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    vl: &Varlen,
    p: &FlashParams,
) -> Result<Tensor> {
    check(q, k, v, vl, p)?;
    let cq = host_offsets("cu_seqlens_q", &vl.cu_seqlens_q, q.dim(0)?, vl.max_seqlen_q)?;
    let ck = host_offsets("cu_seqlens_k", &vl.cu_seqlens_k, k.dim(0)?, vl.max_seqlen_k)?;
    let (_, h, d) = q.dims3()?;
    let mut parts = Vec::with_capacity(cq.len());
    for b in 0..cq.len() - 1 {
        let (q0, nq, k0, nk) = (cq[b], cq[b + 1] - cq[b], ck[b], ck[b + 1] - ck[b]);
        if nq == 0 {
            continue;
        }
        if nk == 0 {
            parts.push(Tensor::zeros((nq, h, d), q.dtype(), q.device())?);
            continue;
        }
        let mut ps = p.clone();
        if let Some(s) = p.alibi_slopes.as_ref().filter(|s| s.rank() == 2) {
            ps.alibi_slopes = Some(s.narrow(0, b, 1)?);
        }
        let one = |t: &Tensor, start, len| t.narrow(0, start, len)?.unsqueeze(0);
        let (qs, ks, vs) = (one(q, q0, nq)?, one(k, k0, nk)?, one(v, k0, nk)?);
        parts.push(crate::reference::attention(&qs, &ks, &vs, &ps)?.squeeze(0)?);
    }
    let covered = cq[cq.len() - 1];
    if covered < q.dim(0)? {
        parts.push(Tensor::zeros(
            (q.dim(0)? - covered, h, d),
            q.dtype(),
            q.device(),
        )?);
    }
    match parts.is_empty() {
        true => q.zeros_like(),
        false => Tensor::cat(&parts, 0),
    }
}
