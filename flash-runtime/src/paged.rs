//! Paged KV caches (vLLM's layout): [`PagedKv`], and
//! [`FlashAttention::forward_kvcache_paged`] / [`FlashAttention::forward_kvcache_paged_into`],
//! the KV-cache forward over page pools and a page table.

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut};

use crate::FlashAttention;
use crate::error::Result;
use crate::forward::alloc_outputs;
use crate::outputs::Forward;
use crate::params::{AttnParams, KvOptions};
use crate::tensor::{Element, Tensor4, Tensor4Mut};
use crate::validate::kvcache_splits;

/// A paged KV cache: K and V page pools `[num_pages, page_size, heads_k, head_dim]` (any
/// strides with a contiguous last dim, like every tensor here) and the page table, i32
/// `[batch, max_pages]` row-major on the device.
///
/// Key `n` of sequence `b` sits in row `n % page_size` of page `block_table[b][n /
/// page_size]` of both pools; a sequence holds at most `max_pages * page_size` keys (its
/// capacity). `page_size` is a power of two (vLLM's 16, or 32 ... 256; any power of two
/// runs). Pages can be shared between sequences (a common prefix) and sit in any order.
///
/// The table's contents are device data and are not trusted: the kernel clamps every
/// entry it reads to `[0, num_pages)` and every index to the row (a garbage table reads
/// the wrong pages, never outside the pools or the table). Entries past a sequence's
/// `seqlens_k[b]` keys may hold anything: their pages are never used.
#[derive(Debug)]
pub struct PagedKv<'a, T> {
    pub(crate) k_pages: Tensor4<'a, T>,
    pub(crate) v_pages: Tensor4<'a, T>,
    pub(crate) block_table: CudaView<'a, i32>,
    pub(crate) table_shape: [usize; 2],
}

impl<'a, T> PagedKv<'a, T> {
    /// The pools `k_pages`, `v_pages` `[num_pages, page_size, heads_k, head_dim]` and the
    /// page table `block_table`, i32 `[table_shape[0] = batch, table_shape[1] = max_pages]`
    /// (row-major, no gaps; its buffer may be longer). Nothing is checked here: the
    /// forward checks everything before it launches.
    pub fn new(
        k_pages: Tensor4<'a, T>,
        v_pages: Tensor4<'a, T>,
        block_table: CudaView<'a, i32>,
        table_shape: [usize; 2],
    ) -> Self {
        PagedKv {
            k_pages,
            v_pages,
            block_table,
            table_shape,
        }
    }

    /// Rows of a page (the pools' dim 1).
    pub fn page_size(&self) -> usize {
        self.k_pages.shape()[1]
    }

    /// The most keys a sequence holds, `max_pages * page_size` (saturating).
    pub fn capacity(&self) -> usize {
        self.table_shape[1].saturating_mul(self.page_size())
    }

    /// The cache as a contiguous one of the same capacity would be shaped, `[batch,
    /// capacity, heads_k, head_dim]` (the split count of a paged call, which splits
    /// sooner with small pages, is [`FlashAttention::kvcache_paged_splits`]'s).
    pub fn cache_shape(&self) -> [usize; 4] {
        let [_, _, hk, d] = self.k_pages.shape();
        [self.table_shape[0], self.capacity(), hk, d]
    }
}

/// A KV-cache forward's keys and values: contiguous caches or a paged one.
pub(crate) enum KvSource<'r, 'a, T> {
    Dense {
        k: &'r Tensor4<'a, T>,
        v: &'r Tensor4<'a, T>,
    },
    Paged(&'r PagedKv<'a, T>),
}

impl<'r, 'a, T> KvSource<'r, 'a, T> {
    /// The K and V tensors the kernels read: the caches, or the pools.
    pub(crate) fn pools(&self) -> (&'r Tensor4<'a, T>, &'r Tensor4<'a, T>) {
        match *self {
            KvSource::Dense { k, v } => (k, v),
            KvSource::Paged(p) => (&p.k_pages, &p.v_pages),
        }
    }

    /// Their names in errors.
    pub(crate) fn names(&self) -> (&'static str, &'static str) {
        match self {
            KvSource::Dense { .. } => ("k_cache", "v_cache"),
            KvSource::Paged(_) => ("k_pages", "v_pages"),
        }
    }
}

impl FlashAttention {
    /// Paged KV-cache attention forward, allocating `o` (contiguous, shaped like q) and
    /// `lse` (f32 `[batch, heads, seqlen_q]`); see
    /// [`FlashAttention::forward_kvcache_paged_into`].
    ///
    /// ```no_run
    /// use flash_runtime::{AttnParams, FlashAttention, KvOptions, PagedKv, Tensor4};
    /// # fn main() -> flash_runtime::Result<()> {
    /// let rt = FlashAttention::on_device(0)?;
    /// let stream = rt.context().default_stream();
    /// // 2 sequences, up to 4 pages of 16 keys each, from a pool of 8 pages
    /// let (b, h, hk, d, pages, page, max_pages) = (2, 32, 8, 128, 8, 16, 4);
    /// let zero = flash_runtime::half::bf16::from_f32(0.0);
    /// let q = stream.clone_htod(&vec![zero; b * h * d])?;
    /// let k_pool = stream.clone_htod(&vec![zero; pages * page * hk * d])?;
    /// let v_pool = stream.clone_htod(&vec![zero; pages * page * hk * d])?;
    /// let table = stream.clone_htod(&[5i32, 2, 7, 0, /* seq 1: */ 1, 3, 0, 0])?;
    /// let seqlens = stream.clone_htod(&[50i32, 20])?;
    /// let pool = |x| Tensor4::contiguous(x, [pages, page, hk, d]);
    /// let cache = PagedKv::new(pool(&k_pool), pool(&v_pool), table.as_view(), [b, max_pages]);
    /// let out = rt.forward_kvcache_paged(
    ///     &stream,
    ///     &Tensor4::contiguous(&q, [b, 1, h, d]),
    ///     &cache,
    ///     Some(&seqlens.as_view()),
    ///     &AttnParams::causal(),
    ///     &KvOptions::default(),
    /// )?;
    /// # let _ = out.o;
    /// # Ok(()) }
    /// ```
    pub fn forward_kvcache_paged<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        cache: &PagedKv<'_, T>,
        seqlens_k: Option<&CudaView<'_, i32>>,
        params: &AttnParams,
        opts: &KvOptions,
    ) -> Result<Forward<T>> {
        let (mut o, mut lse) = alloc_outputs(stream, q.shape())?;
        let mut o_t = Tensor4Mut::contiguous(&mut o, q.shape());
        let lse_v = Some(lse.as_view_mut());
        let src = KvSource::Paged(cache);
        self.run_kvcache(stream, q, src, seqlens_k, &mut o_t, lse_v, params, opts)?;
        Ok(Forward {
            o,
            lse,
            shape: q.shape(),
        })
    }

    /// Paged KV-cache attention forward into preallocated outputs: what
    /// [`FlashAttention::forward_kvcache_into`] computes (same q, o, lse, `seqlens_k` and
    /// mask rules, `capacity = max_pages * page_size`), with the keys and values of each
    /// sequence read through its row of the page table ([`PagedKv`]). The split rule is
    /// the contiguous one except with pages smaller than the kernel's key block, which
    /// split sooner ([`FlashAttention::kvcache_paged_splits`] gives the count).
    ///
    /// Checked before the first launch, each a typed [`FlashError`](crate::FlashError):
    /// the table's shape (`[batch, max_pages]` with q's batch) and buffer (at least
    /// `batch * max_pages` i32, 4-byte aligned), the page size (a power of two, at most
    /// 2^30), the capacity (at most `validate::MAX_CAPACITY` keys), the pools' shapes
    /// (equal, q's head dim, at least one page unless `max_pages == 0`), dtypes and
    /// layouts (16-byte aligned, strides multiples of 8 elements, page and row strides
    /// below 2^31 elements, inside their buffers), and everything the contiguous forward
    /// checks. Appending this step's keys
    /// (writing them into their pages, growing the table) is the caller's job.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_kvcache_paged_into<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        cache: &PagedKv<'_, T>,
        seqlens_k: Option<&CudaView<'_, i32>>,
        o: &mut Tensor4Mut<'_, T>,
        lse: Option<CudaViewMut<'_, f32>>,
        params: &AttnParams,
        opts: &KvOptions,
    ) -> Result<()> {
        let src = KvSource::Paged(cache);
        self.run_kvcache(stream, q, src, seqlens_k, o, lse, params, opts)
    }

    /// The number of key-range splits [`FlashAttention::forward_kvcache_paged`] runs for
    /// q `[b, sq, h, d]` over page pools `[num_pages, page_size, hk, d]` and a page table
    /// `[b, max_pages]` of `T` with `params` and `opts` on this GPU; errors as
    /// [`FlashAttention::kvcache_splits`]'. Pages smaller than the kernel's key block
    /// split sooner than a contiguous cache (`validate::num_splits_for_paged`).
    pub fn kvcache_paged_splits<T: Element>(
        &self,
        q_shape: [usize; 4],
        (pool_shape, table_shape): ([usize; 4], [usize; 2]),
        params: &AttnParams,
        opts: &KvOptions,
    ) -> Result<u32> {
        let gpu = self.gpu_fill();
        let [_, page, hk, d] = pool_shape;
        let k_shape = [table_shape[0], table_shape[1].saturating_mul(page), hk, d];
        let problem = (T::DTYPE, params);
        let cache = (k_shape, Some(page));
        kvcache_splits(q_shape, cache, problem, opts.num_splits, self.arch, gpu)
    }
}
