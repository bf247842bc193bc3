//! Paged KV-cache checks: the page pools and the page table of a paged KV-cache forward
//! ([`KvArgs::paged`]), reduced to the cache the split rule and the kernels see (its
//! capacity `max_pages * page_size`) and the fwdpaged kernel's four table parameters.
//!
//! The host checks what it can: the table's shape and buffer, the page size (a power of
//! two), the pools' shapes and layout. The table's *contents* live on the device and are
//! never trusted: the kernel clamps every entry to `[0, num_pages)`, so any value reads a
//! page of the pools and nothing else (`flash_codegen::abi::decode::FWD_PAGED_PARAMS`).

use super::{BufDesc, KvArgs, TensorDesc, shape_err, u32_of};
use crate::error::{FlashError, Result};

/// The page table of a paged cache: `k` and `v` of the [`KvArgs`] are then the pools
/// `[num_pages, page_size, heads_k, head_dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedDesc {
    /// i32 `[batch, max_pages]`, row-major with no gaps: entry `[b, i]` is the page holding
    /// keys `i * page_size ..` of sequence `b`.
    pub block_table: BufDesc,
    /// `[batch, max_pages]`.
    pub shape: [usize; 2],
}

/// A checked paged cache: the kernel's view of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PagedCache {
    /// Keys a sequence can hold: `max_pages * page_size` (the kernels' `seqlen_k`).
    pub capacity: usize,
    /// The table's address (0 when it is empty).
    pub table: u64,
    pub max_pages: u32,
    /// `log2(page_size)`.
    pub page_shift: u32,
    pub num_pages: u32,
}

/// The largest page the kernels take: 2^30 rows (`page_shift <= 30`).
const MAX_PAGE_SHIFT: u32 = 30;

/// Check the pools `a.k`, `a.v` and the table `p` of a paged call with batch `b`.
pub(crate) fn check_paged(a: &KvArgs, p: &PagedDesc, b: usize) -> Result<PagedCache> {
    let [num_pages, page_size, _, _] = a.k.shape;
    let [tb, max_pages] = p.shape;
    if tb != b {
        return Err(shape_err(format!(
            "block_table has shape {:?} but q's batch is {b}; the table must be [batch, \
             max_pages], one row of page indices per sequence",
            p.shape
        )));
    }
    if !page_size.is_power_of_two() || page_size > 1 << MAX_PAGE_SHIFT {
        return Err(shape_err(format!(
            "the pools' page size (k_pages dim 1) is {page_size}; it must be a power of two \
             (16, 32, 64, 128, 256, ...; at most 2^{MAX_PAGE_SHIFT}): the kernels find a \
             key's page with a shift"
        )));
    }
    let entries = b.saturating_mul(max_pages);
    if p.block_table.len < entries {
        return Err(shape_err(format!(
            "block_table must hold batch * max_pages = {b} * {max_pages} = {entries} i32 \
             values (row-major, no gaps) but its buffer holds {}",
            p.block_table.len
        )));
    }
    let capacity = max_pages.saturating_mul(page_size);
    let what = "a sequence's capacity, max_pages * page_size,";
    u32_of(capacity, what)?;
    if capacity > 0 && num_pages == 0 {
        return Err(shape_err(format!(
            "the pools k_pages and v_pages hold no page (dim 0 is 0) but block_table has \
             {max_pages} entries a sequence; allocate the pools, or pass max_pages = 0 for an \
             empty cache"
        )));
    }
    let table = match entries {
        0 => 0,
        _ if p.block_table.ptr == 0 || !p.block_table.ptr.is_multiple_of(4) => {
            return Err(FlashError::Misaligned {
                tensor: "block_table",
                why: format!(
                    "its pointer {:#x} is null or not 4-byte aligned",
                    p.block_table.ptr
                ),
            });
        }
        _ => p.block_table.ptr,
    };
    Ok(PagedCache {
        capacity,
        table,
        max_pages: u32_of(max_pages, "block_table's max_pages")?,
        page_shift: page_size.trailing_zeros(),
        num_pages: u32_of(num_pages, "the pools' page count (dim 0)")?,
    })
}

/// The kernels address a pool page as `page * page_stride * 2` bytes and a row within it
/// as `row * row_stride * 2` bytes, each factor in 32 bits: a pool's page stride (dim 0)
/// and row stride (dim 1) must stay below 2^31 elements.
pub(crate) fn check_pool_strides(name: &'static str, t: &TensorDesc) -> Result<()> {
    for (dim, what) in [
        (0, "page stride (dim 0)"),
        (1, "row stride (dim 1, within a page)"),
    ] {
        if t.shape[dim] > 1 && t.strides[dim] >= 1 << 31 {
            return Err(FlashError::StrideMismatch {
                tensor: name,
                why: format!("its {what} {} must be below 2^31 elements", t.strides[dim]),
            });
        }
    }
    Ok(())
}
