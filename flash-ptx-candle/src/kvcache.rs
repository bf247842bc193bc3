//! Attention against a KV cache, for decoding, speculative verification and chunked
//! prefill: [`flash_attn_kvcache`] (a preallocated cache per sequence) and
//! [`flash_attn_paged`] (vLLM's page pools and page table, [`PagedCache`]). Forward only:
//! they serve inference (split-KV kernels; train with [`flash_attn`](crate::flash_attn)
//! or [`flash_attn_varlen`](crate::flash_attn_varlen)).
//!
//! Appending this step's keys and values is the caller's job (`slice_set` them into the
//! cache at positions `seqlens_k[b] - sq ..`, or into their pages, before the call).

use candle_core::{DType, Device, Result, Tensor};

use crate::FlashParams;
use crate::checks::{self, err};

/// A paged KV cache: K and V page pools `[num_pages, page_size, hk, d]` (`page_size` a
/// power of two: vLLM's 16, or 32 ... 256) and the page table, u32 (or i32) `[batch,
/// max_pages]`: key `n` of sequence `b` sits in row `n % page_size` of page
/// `block_table[b][n / page_size]`. Pages may be shared and sit in any order; the table
/// is device data and not trusted (the kernels clamp every entry to the pools).
#[derive(Clone, Debug)]
pub struct PagedCache {
    /// K pages `[num_pages, page_size, hk, d]`.
    pub k_pages: Tensor,
    /// V pages, shaped like `k_pages`.
    pub v_pages: Tensor,
    /// `[batch, max_pages]` page indices.
    pub block_table: Tensor,
}

impl PagedCache {
    /// The pools and the page table (see the type's docs).
    pub fn new(k_pages: &Tensor, v_pages: &Tensor, block_table: &Tensor) -> Self {
        PagedCache {
            k_pages: k_pages.clone(),
            v_pages: v_pages.clone(),
            block_table: block_table.clone(),
        }
    }
}

/// Attention of `q [b, sq, h, d]` (the last `sq` positions of each sequence) over the
/// first `seqlens_k[b]` keys of `k_cache, v_cache [b, capacity, hk, d]` (u32 or i32 `[b]`
/// on q's device, clamped to `[0, capacity]` by the kernels; `None`: the whole cache).
/// Causal and windows are bottom-right against those keys; a query that sees no key gets
/// zeros. `p.num_splits` sets the key-range splits (default: the runtime fills the GPU).
/// `o` like q. Tensors on other devices take [`attention_kvcache`].
pub fn flash_attn_kvcache(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    seqlens_k: Option<&Tensor>,
    p: &FlashParams,
) -> Result<Tensor> {
    let dims = checks::inputs(q, k_cache, v_cache, p)?;
    if let Some(s) = seqlens_k {
        checks::index("seqlens_k", s, &[dims.b], q)?;
    }
    p.attn_params()?;
    if q.device().is_cuda() {
        #[cfg(feature = "cuda")]
        return crate::cuda::flash_attn_kvcache(q, k_cache, v_cache, seqlens_k, None, p);
        #[cfg(not(feature = "cuda"))]
        return Err(crate::no_cuda());
    }
    attention_kvcache(q, k_cache, v_cache, seqlens_k, p)
}

/// [`flash_attn_kvcache`] over a paged cache: sequence `b` holds up to `max_pages *
/// page_size` keys, read through its row of the page table.
pub fn flash_attn_paged(
    q: &Tensor,
    cache: &PagedCache,
    seqlens_k: Option<&Tensor>,
    p: &FlashParams,
) -> Result<Tensor> {
    let b = check_paged(q, cache, seqlens_k, p)?;
    p.attn_params()?;
    if q.device().is_cuda() {
        #[cfg(feature = "cuda")]
        return crate::cuda::flash_attn_kvcache(
            q,
            &cache.k_pages,
            &cache.v_pages,
            seqlens_k,
            Some(&cache.block_table),
            p,
        );
        #[cfg(not(feature = "cuda"))]
        return Err(crate::no_cuda());
    }
    let (k, v) = gather(cache, b)?;
    attention_kvcache(q, &k, &v, seqlens_k, p)
}

/// The paged call's checks; returns the batch.
fn check_paged(
    q: &Tensor,
    c: &PagedCache,
    seqlens_k: Option<&Tensor>,
    p: &FlashParams,
) -> Result<usize> {
    let dims = checks::tensors(q, &c.k_pages, &c.v_pages, false)?;
    let pages = c.block_table.dims().get(1).copied().unwrap_or(0);
    checks::index("block_table", &c.block_table, &[dims.b, pages], q)?;
    if let Some(s) = seqlens_k {
        checks::index("seqlens_k", s, &[dims.b], q)?;
    }
    let page_size = c.k_pages.dim(1)?;
    if !page_size.is_power_of_two() {
        return Err(err(format!(
            "page size {page_size} (the pools' dim 1): pages hold a power of two of keys \
             (vLLM's 16, or 32 ... 256)"
        )));
    }
    checks::slopes(p, dims.b, dims.h, q)?;
    Ok(dims.b)
}

/// Host values of an index tensor.
fn host(t: &Tensor) -> Result<Vec<i64>> {
    t.to_device(&Device::Cpu)?
        .to_dtype(DType::I64)?
        .flatten_all()?
        .to_vec1()
}

/// Both pools' pages in table order: `[b, max_pages * page_size, hk, d]` each (entries
/// clamped to the pool, as the kernels clamp them).
fn gather(c: &PagedCache, b: usize) -> Result<(Tensor, Tensor)> {
    let (pages, page_size, hk, d) = c.k_pages.dims4()?;
    let table = host(&c.block_table)?;
    let shape = (b, table.len() / b.max(1) * page_size, hk, d);
    if pages == 0 {
        let zeros = Tensor::zeros(shape, c.k_pages.dtype(), c.k_pages.device())?;
        return Ok((zeros.clone(), zeros));
    }
    let rows: Vec<u32> = table
        .iter()
        .flat_map(|&e| {
            let page = e.clamp(0, pages as i64 - 1) as u32;
            (0..page_size as u32).map(move |r| page * page_size as u32 + r)
        })
        .collect();
    let idx = Tensor::new(rows, c.k_pages.device())?;
    let read = |pool: &Tensor| {
        pool.reshape((pages * page_size, hk, d))?
            .index_select(&idx, 0)?
            .reshape(shape)
    };
    Ok((read(&c.k_pages)?, read(&c.v_pages)?))
}

/// [`flash_attn_kvcache`]'s semantics from candle ops (each sequence's valid keys through
/// [`reference::attention`](crate::reference::attention)).
pub fn attention_kvcache(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    seqlens_k: Option<&Tensor>,
    p: &FlashParams,
) -> Result<Tensor> {
    let dims = checks::inputs(q, k_cache, v_cache, p)?;
    let lens = match seqlens_k {
        Some(s) => {
            checks::index("seqlens_k", s, &[dims.b], q)?;
            host(s)?
        }
        None => vec![dims.sk as i64; dims.b],
    };
    let mut parts = Vec::with_capacity(dims.b);
    for (b, &len) in lens.iter().enumerate() {
        let n = len.clamp(0, dims.sk as i64) as usize;
        let qb = q.narrow(0, b, 1)?;
        if n == 0 {
            parts.push(qb.zeros_like()?);
            continue;
        }
        let mut pb = p.clone();
        if let Some(s) = p.alibi_slopes.as_ref().filter(|s| s.rank() == 2) {
            pb.alibi_slopes = Some(s.narrow(0, b, 1)?);
        }
        let kb = k_cache.narrow(0, b, 1)?.narrow(1, 0, n)?;
        let vb = v_cache.narrow(0, b, 1)?.narrow(1, 0, n)?;
        parts.push(crate::reference::attention(&qb, &kb, &vb, &pb)?);
    }
    match parts.is_empty() {
        true => q.zeros_like(),
        false => Tensor::cat(&parts, 0),
    }
}
