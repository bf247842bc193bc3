//! Argument checks of the paged KV-cache forward, through the pure validate layer (no GPU
//! needed): the page table's shape and buffer, the page size, the pools' shapes, dtypes and
//! layouts each give their typed `FlashError` with an actionable message; good inputs plan
//! the fwdpaged kernel with the split count and tiling a contiguous cache of the same
//! capacity gets, and the table parameters the ABI names.

mod kvcache_support;

use flash_codegen::abi::decode::split_grid;
use flash_codegen::{Arch, DType, KernelSpec, Pass};
use flash_runtime::validate::{
    KvArgs, PagedDesc, ParamValue, TensorDesc, kvcache_splits, num_splits_for_paged,
};
use flash_runtime::{AttnParams, FlashError};
use kvcache_support::{BF, H200, args, assert_follows_abi, buf, err, plan, t, with_splits};

/// Where `paged` puts the table.
const TABLE: u64 = 0xc000_0000;

/// q [b, sq, h, d] over pools [pages, page, hk, d] (contiguous, exact buffers) and a
/// table [b, max_pages] holding exactly its entries.
fn paged(
    (b, sq, h, hk, d): (usize, usize, usize, usize, usize),
    pages: usize,
    page: usize,
    max_pages: usize,
) -> KvArgs<'static> {
    let mut a = args(b, sq, 0, h, hk, d);
    a.k = t([pages, page, hk, d], 0x2000_0000);
    a.v = t([pages, page, hk, d], 0x3000_0000);
    a.paged = Some(PagedDesc {
        block_table: buf(TABLE, b * max_pages),
        shape: [b, max_pages],
    });
    a
}

fn table<'a>(a: &'a mut KvArgs<'_>) -> &'a mut PagedDesc {
    a.paged.as_mut().unwrap()
}

/// The fwdpaged kernel in the split kernel's tiling, the split count of the contiguous
/// rule (pages of a key block or more) or of the small-page rule, the table's
/// parameters, the capacity as seqlen_k, the pools' page stride as the batch stride.
#[test]
fn paged_plans_follow_the_abi_and_the_split_rules() {
    for (shape, pages, page, max_pages) in [
        ((4, 1, 32, 8, 128), 4096, 16, 256), // decode, 4K keys a sequence, vLLM pages
        ((2, 4, 8, 1, 64), 64, 256, 16),     // speculative, MQA
        ((1, 256, 32, 8, 128), 300, 32, 128), // chunked prefill: the prefill row
        ((3, 16, 4, 4, 256), 7, 64, 3),      // a pool smaller than the tables' reach
    ] {
        let (b, sq, h, hk, d) = shape;
        let a = paged(shape, pages, page, max_pages);
        let p = plan(&a).unwrap();
        let cap = page * max_pages;
        let dense = plan(&args(b, sq, cap, h, hk, d)).unwrap();
        assert_eq!(p.split.spec.pass, Pass::FwdPaged);
        assert_eq!(p.split.spec.tiling, dense.split.spec.tiling, "{shape:?}");
        let fwdsplit = KernelSpec {
            pass: Pass::FwdSplit,
            ..p.split.spec
        };
        let logical = ([b, sq, h, d], [b, cap, hk, d]);
        let rule = num_splits_for_paged(&fwdsplit, logical, H200, page);
        assert_eq!(p.num_splits, rule, "{shape:?}");
        if page >= p.split.spec.tiles().block_n() as usize {
            assert_eq!(p.num_splits, dense.num_splits, "{shape:?}");
            assert_eq!(p.combine, dense.combine, "{shape:?}");
        }
        assert_follows_abi(&p.split);
        let dims = [b, sq, h, hk].map(|x| x as u32);
        assert_eq!(p.split.grid, split_grid(&p.split.spec, dims, p.num_splits));
        let u32p = |n: &str| p.split.param(n).unwrap();
        assert_eq!(u32p("block_table"), ParamValue::U64(TABLE));
        assert_eq!(u32p("max_pages"), ParamValue::U32(max_pages as u32));
        assert_eq!(u32p("page_shift"), ParamValue::U32(page.trailing_zeros()));
        assert_eq!(u32p("num_pages"), ParamValue::U32(pages as u32));
        assert_eq!(u32p("seqlen_k"), ParamValue::U32(cap as u32));
        assert_eq!(
            u32p("k_batch_stride"),
            ParamValue::U64((page * hk * d) as u64)
        );
        assert_eq!(u32p("v_row_stride"), ParamValue::U32((hk * d) as u32));
    }
    // a contiguous call plans fwdsplit with a null table
    let p = plan(&args(1, 1, 4096, 8, 8, 128)).unwrap();
    assert_eq!(p.split.spec.pass, Pass::FwdSplit);
    assert_eq!(p.split.param("block_table"), None);
}

/// Pages smaller than a key block split sooner than a contiguous cache (measured on the
/// H200: `num_splits_for_paged`); pages of a block or more as a contiguous cache.
#[test]
fn small_pages_split_sooner() {
    for (shape, cap, small, large, dense) in [
        ((8, 1, 32, 8, 128), 4096, 2, 1, 1), // 64 CTAs: 2 splits with 16-row pages
        ((64, 1, 8, 1, 64), 4096, 2, 1, 1),  // MQA, 64 CTAs
        ((1, 1, 8, 1, 64), 131072, 128, 64, 64), // one CTA a split: up to 128
        ((64, 1, 32, 8, 128), 4096, 1, 1, 1), // 512 CTAs fill the GPU
    ] {
        let (b, sq, h, hk, d) = shape;
        let splits = |page: usize| {
            let a = paged(shape, b * cap / page, page, cap / page);
            plan(&a).unwrap().num_splits
        };
        assert_eq!(
            plan(&args(b, sq, cap, h, hk, d)).unwrap().num_splits,
            dense,
            "{shape:?}"
        );
        assert_eq!(splits(16), small, "{shape:?} page 16");
        assert_eq!(splits(256), large, "{shape:?} page 256");
        // the count from the shapes alone (FlashAttention::kvcache_paged_splits) is the plan's
        for page in [16, 256] {
            let cache = ([b, cap, hk, d], Some(page));
            let params = AttnParams::new();
            let n = kvcache_splits([b, sq, h, d], cache, (BF, &params), None, Arch::Sm80, H200);
            assert_eq!(n.unwrap(), splits(page), "{shape:?} page {page}");
        }
    }
}

/// Strided pools (a view of a larger buffer: more layers, padded heads) and a table
/// buffer longer than its entries; one page of one row; an explicit split count.
#[test]
fn strided_pools_and_odd_pages_are_accepted() {
    let mut a = paged((2, 1, 8, 2, 64), 10, 16, 50);
    let strides = [16 * 4 * 72 * 3, 4 * 72, 72, 1]; // 3 layers, 4 heads of 72
    for pool in [&mut a.k, &mut a.v] {
        pool.strides = strides;
        pool.len = 10 * strides[0];
    }
    table(&mut a).block_table.len = 1000;
    let p = plan(&with_splits(a, 3)).unwrap();
    assert_eq!(p.num_splits, 3);
    assert_eq!(
        p.split.param("k_batch_stride"),
        Some(ParamValue::U64(strides[0] as u64))
    );
    assert_eq!(p.split.param("k_head_stride"), Some(ParamValue::U32(72)));
    // page size 1 (each key its own page) and a single page in the pools
    let p = plan(&paged((1, 1, 4, 4, 32), 1, 1, 100)).unwrap();
    assert_eq!(p.split.param("page_shift"), Some(ParamValue::U32(0)));
    assert_eq!(p.split.param("seqlen_k"), Some(ParamValue::U32(100)));
}

/// No table entries (max_pages 0): capacity 0, launched without reading the pools or the
/// table (even with no pages and a null table); an empty batch launches nothing.
#[test]
fn empty_tables_and_batches() {
    let mut a = paged((2, 1, 8, 2, 64), 0, 16, 0);
    table(&mut a).block_table = buf(0, 0);
    let p = plan(&a).unwrap();
    assert!(!p.is_noop());
    assert_eq!(p.split.param("seqlen_k"), Some(ParamValue::U32(0)));
    assert_eq!(p.split.param("block_table"), Some(ParamValue::U64(0)));
    let mut a = paged((0, 1, 8, 2, 64), 8, 16, 4);
    table(&mut a).block_table = buf(0, 0);
    assert!(plan(&a).unwrap().is_noop());
}

/// Each host-checkable mistake of the table and the pools: its error and message.
#[test]
fn bad_tables_and_pools_are_typed_errors() {
    let base = || paged((2, 1, 8, 2, 64), 32, 16, 8);
    let mut cases: Vec<(KvArgs<'static>, &str)> = Vec::new();
    let mut a = base();
    table(&mut a).shape = [3, 8];
    cases.push((a, "block_table has shape [3, 8] but q's batch is 2"));
    for page in [48, 0, 3] {
        let mut a = base();
        a.k.shape[1] = page;
        a.v.shape[1] = page;
        cases.push((a, "must be a power of two"));
    }
    let mut a = base();
    table(&mut a).block_table.len = 15;
    cases.push((
        a,
        "block_table must hold batch * max_pages = 2 * 8 = 16 i32",
    ));
    let mut a = base();
    table(&mut a).shape = [2, 1 << 29];
    table(&mut a).block_table.len = usize::MAX;
    cases.push((a, "max_pages * page_size, = 8589934592 does not fit in u32"));
    let mut a = base();
    a.k.shape[0] = 0;
    a.v.shape[0] = 0;
    cases.push((a, "hold no page"));
    // 2^31 keys a sequence: past what the kernels index (seqlens_k is i32)
    let mut a = base();
    table(&mut a).shape = [2, 1 << 27];
    table(&mut a).block_table.len = usize::MAX;
    cases.push((
        a,
        "capacity 2147483648 (paged: max_pages * page_size) exceeds 2147482624",
    ));
    let mut a = base();
    a.v = t([32, 32, 2, 64], 0x3000_0000);
    cases.push((
        a,
        "v_pages has shape [32, 32, 2, 64] but k_pages has [32, 16, 2, 64]",
    ));
    let mut a = base();
    a.k = t([32, 16, 2, 32], 0x2000_0000);
    a.v = t([32, 16, 2, 32], 0x3000_0000);
    cases.push((a, "k_pages has head_dim 32 (dim 3) but q has 64"));
    let mut a = base();
    a.k.len -= 1;
    cases.push((a, "`k_pages` with shape"));
    for (a, want) in cases {
        let (e, msg) = err(&a);
        assert!(matches!(e, FlashError::ShapeMismatch(_)), "{e:?}");
        assert!(msg.contains(want), "{msg}\nwant: {want}");
    }
}

/// Alignment, strides and dtypes name the pool or the table.
#[test]
fn misaligned_strided_and_mistyped_pools() {
    let base = || paged((2, 1, 8, 2, 64), 32, 16, 8);
    let mut misaligned: Vec<(KvArgs<'static>, &str, &str)> = Vec::new();
    for ptr in [TABLE + 2, 0] {
        let mut a = base();
        table(&mut a).block_table.ptr = ptr;
        misaligned.push((a, "block_table", "null or not 4-byte aligned"));
    }
    let mut a = base();
    a.v.strides[0] += 4; // the page stride
    a.v.len += 32 * 4;
    misaligned.push((a, "v_pages", "batch stride"));
    let mut a = base();
    a.k.ptr += 8;
    misaligned.push((a, "k_pages", "16-byte aligned"));
    for (a, name, want) in misaligned {
        let (e, msg) = err(&a);
        let FlashError::Misaligned { tensor, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(tensor, name, "{msg}");
        assert!(msg.contains(want), "{msg}");
    }
    let mut a = base();
    a.k.strides[1] = 1 << 31;
    a.k.len = usize::MAX;
    let (e, msg) = err(&a);
    assert!(
        matches!(
            e,
            FlashError::StrideMismatch {
                tensor: "k_pages",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(msg.contains("row stride (dim 1, within a page)"), "{msg}");
    let mut a = base();
    a.v.strides[0] = 1 << 31;
    a.v.len = usize::MAX;
    let (e, msg) = err(&a);
    assert!(
        matches!(
            e,
            FlashError::StrideMismatch {
                tensor: "v_pages",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        msg.contains("page stride (dim 0) 2147483648 must be below 2^31"),
        "{msg}"
    );
    let mut a = base();
    a.v = TensorDesc {
        dtype: DType::F16,
        ..a.v
    };
    let (e, _) = err(&a);
    assert!(
        matches!(
            e,
            FlashError::DTypeMismatch {
                tensor: "v_pages",
                ..
            }
        ),
        "{e:?}"
    );
}
