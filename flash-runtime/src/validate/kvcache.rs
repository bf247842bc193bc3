//! KV-cache forward checks: one pure function from the call's tensors, `seqlens_k` and
//! split count to the split pass's launch, the combine pass's (when the keys are split)
//! and the f32 scratch between them (`flash_codegen::abi::decode` documents the sequence,
//! the packed row order and the partial buffers).
//!
//! Edge cases: an empty batch, zero heads or `seqlen_q == 0` plan nothing to launch. A
//! cache of capacity 0 (or a sequence whose `seqlens_k` is 0) *is launched*: the kernels
//! write `o = 0`, `lse = -inf` for its rows without reading k or v.

use flash_codegen::abi::decode::{combine_grid, split_grid};
use flash_codegen::abi::{self};
use flash_codegen::{Arch, KernelSpec, Mask, Pass, Tiling};

use super::fwd::check_lse;
use super::modifiers::{AlibiDesc, call_scores, check_window_lengths, modifier_param};
use super::paged::{PagedCache, PagedDesc, check_paged, check_pool_strides};
use super::split_rule::{GpuFill, resolve_splits, rule_k_shape, split_spec};
use super::{
    BufDesc, LaunchPlan, LseDesc, MAX_GRID_X, MAX_GRID_YZ, ParamValue, Placed, TensorDesc,
    bind_params, bind_spec_params, check_dtypes, check_problem, launch, place, prod, shape_err,
    tensor_param, u32_of,
};
use crate::error::{FlashError, Result};
use crate::params::AttnParams;

/// All arguments of a KV-cache forward call, as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvArgs<'a> {
    /// Queries `[b, sq, h, d]`: the last `sq` positions of each sequence.
    pub q: TensorDesc,
    /// The key cache `[b, capacity, hk, d]`.
    pub k: TensorDesc,
    /// The value cache, shaped like `k`.
    pub v: TensorDesc,
    /// Output `[b, sq, h, d]`, like q.
    pub o: TensorDesc,
    /// Optional log-sum-exp output, f32 `[b, h, sq]`.
    pub lse: Option<LseDesc>,
    /// Valid keys per sequence: `len` counts i32 elements (at least `b`); `None`: every
    /// sequence fills the cache.
    pub seqlens_k: Option<BufDesc>,
    /// Mask, scale and modifiers.
    pub params: AttnParams<'a>,
    /// ALiBi's slopes (the buffer of `params.alibi`), or `None`.
    pub alibi: Option<AlibiDesc>,
    /// Explicit split count, or `None` to let [`super::num_splits_for`] choose.
    pub num_splits: Option<u32>,
    /// A paged cache's page table; `k` and `v` are then the page pools `[num_pages,
    /// page_size, heads_k, head_dim]` and each sequence holds `max_pages * page_size` keys.
    pub paged: Option<PagedDesc>,
}

/// A checked KV-cache forward: the split pass, the combine pass when the keys are split,
/// and the f32 scratch between them.
#[derive(Clone, Debug, PartialEq)]
pub struct KvPlan {
    /// The `FwdSplit` launch (a no-op when the problem is empty).
    pub split: LaunchPlan,
    /// The `FwdCombine` launch, after `split` on the same stream; only when
    /// `num_splits > 1`.
    pub combine: Option<LaunchPlan>,
    /// Key-range splits per (sequence, KV head).
    pub num_splits: u32,
    /// f32 elements of the partial outputs: `num_splits * b * h * sq * kernel_head_dim`,
    /// 0 when `num_splits == 1`.
    pub o_accum_len: usize,
    /// f32 elements of the partial LSEs: `num_splits * b * h * sq`, 0 when
    /// `num_splits == 1`.
    pub lse_accum_len: usize,
    /// False until [`KvPlan::bind_scratch`] gave the scratch pointers (true when none is
    /// needed): not launchable before.
    pub scratch_bound: bool,
}

impl KvPlan {
    /// True when the problem is empty and nothing must be launched.
    pub fn is_noop(&self) -> bool {
        self.split.is_noop()
    }

    /// The launches in order: the split pass, then the combine pass if planned.
    pub fn launches(&self) -> impl Iterator<Item = &LaunchPlan> {
        std::iter::once(&self.split).chain(self.combine.as_ref())
    }

    /// Bind the scratch buffers (f32, at least [`KvPlan::o_accum_len`] and
    /// [`KvPlan::lse_accum_len`] elements, 16-byte aligned) into both launches. Nothing to
    /// do when `num_splits == 1` (the kernels get 0 for both).
    pub fn bind_scratch(&mut self, o_accum: BufDesc, lse_accum: BufDesc) -> Result<()> {
        if self.o_accum_len == 0 && self.lse_accum_len == 0 {
            self.scratch_bound = true;
            return Ok(());
        }
        let check = |name: &str, b: &BufDesc, need: usize| -> Result<u64> {
            if b.len < need {
                return Err(shape_err(format!(
                    "split-KV scratch `{name}` holds {} f32 values but this call needs {need} \
                     (KvPlan::{name}_len)",
                    b.len
                )));
            }
            if !b.ptr.is_multiple_of(16) || b.ptr == 0 {
                return Err(FlashError::Internal(format!(
                    "split-KV scratch `{name}` at {:#x} is null or not 16-byte aligned",
                    b.ptr
                )));
            }
            Ok(b.ptr)
        };
        let o = check("o_accum", &o_accum, self.o_accum_len)?;
        let l = check("lse_accum", &lse_accum, self.lse_accum_len)?;
        let split = &mut self.split;
        for plan in std::iter::once(split).chain(self.combine.as_mut()) {
            set_param(plan, "o_accum", ParamValue::U64(o))?;
            set_param(plan, "lse_accum", ParamValue::U64(l))?;
        }
        self.scratch_bound = true;
        Ok(())
    }
}

fn set_param(plan: &mut LaunchPlan, name: &str, value: ParamValue) -> Result<()> {
    match plan.params.iter_mut().find(|(n, _)| *n == name) {
        Some((_, v)) if v.ty() == value.ty() => {
            *v = value;
            Ok(())
        }
        _ => Err(FlashError::Internal(format!(
            "{} has no {} parameter `{name}`",
            plan.spec,
            value.ty()
        ))),
    }
}

/// The most keys a cache (or a paged cache's table row) may hold: the kernels count key
/// rows in 32 bits and compare the rows left in a block as signed values, and
/// `seqlens_k` is i32.
pub const MAX_CAPACITY: usize = (1 << 31) - 1024;

/// The cache's capacity as the kernels' `seqlen_k`, at most [`MAX_CAPACITY`].
fn capacity_of(cap: usize) -> Result<u32> {
    match cap <= MAX_CAPACITY {
        true => Ok(cap as u32),
        false => Err(shape_err(format!(
            "the cache's capacity {cap} (paged: max_pages * page_size) exceeds {MAX_CAPACITY} \
             keys, the most the kernels index (seqlens_k is i32); use a smaller cache or \
             table"
        ))),
    }
}

/// Checks of `seqlens_k` (i32 `[batch]` on the device); returns its pointer.
fn check_seqlens(s: &BufDesc, b: usize) -> Result<u64> {
    if s.len < b {
        return Err(shape_err(format!(
            "seqlens_k must hold batch = {b} i32 values (the valid keys of each sequence) but \
             its buffer holds {}",
            s.len
        )));
    }
    if !s.ptr.is_multiple_of(4) || s.ptr == 0 {
        return Err(FlashError::Misaligned {
            tensor: "seqlens_k",
            why: format!("its pointer {:#x} is null or not 4-byte aligned", s.ptr),
        });
    }
    Ok(s.ptr)
}

/// The grids must fit the hardware: z = `batch * num_splits` and y = `heads_k` at most
/// 65535, and a sequence's `seqlen_q * heads` packed query rows must fit the kernels'
/// 32-bit row index (grid x is then far below its limit).
fn check_kv_grid([b, sq, h, hk]: [usize; 4], block_m: u32, splits: u32) -> Result<()> {
    let (b, sq, h, hk) = (b as u64, sq as u64, h as u64, hk as u64);
    let rows = sq.saturating_mul(h);
    let grid = [
        sq.saturating_mul(h / hk).div_ceil(u64::from(block_m)),
        hk,
        b.saturating_mul(u64::from(splits)),
    ];
    let why = if rows > u64::from(u32::MAX) || grid[0] > MAX_GRID_X {
        format!(
            "seqlen_q * heads = {rows} packed query rows per sequence exceed the kernels' \
             32-bit row index (at most {}); split the queries into several calls",
            u32::MAX
        )
    } else if grid[1] > MAX_GRID_YZ {
        format!("y = heads_k = {hk} exceeds {MAX_GRID_YZ}")
    } else if grid[2] > MAX_GRID_YZ {
        format!(
            "z = batch * num_splits = {b} * {splits} exceeds {MAX_GRID_YZ}; pass fewer \
             splits (KvOptions::with_splits)"
        )
    } else {
        return Ok(());
    };
    Err(FlashError::GridTooLarge { grid, why })
}

/// Check a KV-cache forward call and plan its launches (kernels of `arch`, on a GPU
/// described by `gpu`). The scratch pointers in the parameters are 0 until
/// [`KvPlan::bind_scratch`].
pub fn plan_kvcache(a: &KvArgs, arch: Arch, gpu: GpuFill) -> Result<KvPlan> {
    let dtype = a.q.dtype;
    let (kn, vn) = match a.paged {
        None => ("k_cache", "v_cache"),
        Some(_) => ("k_pages", "v_pages"),
    };
    check_dtypes(dtype, &[(kn, &a.k), (vn, &a.v), ("o", &a.o)])?;
    let [b, sq, h, d] = a.q.shape;
    if a.v.shape != a.k.shape {
        let dims = match a.paged {
            None => "[batch, capacity, heads_k, head_dim]",
            Some(_) => "[num_pages, page_size, heads_k, head_dim]",
        };
        return Err(shape_err(format!(
            "{vn} has shape {:?} but {kn} has {:?}; both must be {dims}",
            a.v.shape, a.k.shape
        )));
    }
    if a.o.shape != a.q.shape {
        return Err(shape_err(format!(
            "o has shape {:?} but q has {:?}; o must be [batch, seqlen_q, heads, head_dim] like q",
            a.o.shape, a.q.shape
        )));
    }
    // The cache as the split rule and the kernels see it: [b, capacity, hk, d].
    let paged = match &a.paged {
        None => None,
        Some(_) if a.k.shape[3] != d => {
            return Err(shape_err(format!(
                "k_pages has head_dim {} (dim 3) but q has {d}; the pools must be [num_pages, \
                 page_size, heads_k, head_dim] with q's head_dim",
                a.k.shape[3]
            )));
        }
        Some(p) => Some(check_paged(a, p, b)?),
    };
    let logical = match paged {
        None => a.k,
        Some(p) => TensorDesc {
            shape: [b, p.capacity, a.k.shape[2], d],
            ..a.k
        },
    };
    let [_, cap, hk, _] = logical.shape;
    let (kernel_d, scale) = check_problem(&a.q, &logical, a.params.softmax_scale)?;
    let spec = |pass: Pass, mask: Mask| KernelSpec {
        pass,
        head_dim: kernel_d,
        dtype,
        mask,
        scores: flash_codegen::Scores::Plain,
        tiling: Tiling::Standard,
        arch,
    };
    let mask = a.params.kernel_mask_for(Pass::FwdSplit)?;
    let (scores, slopes) =
        call_scores(&a.params, a.alibi.as_ref(), (Pass::FwdSplit, mask), (b, h))?;
    let kernel = (kernel_d, dtype, &a.params, scores);
    let split_spec = split_spec(a.q.shape, logical.shape, kernel, arch, gpu)?;
    let shapes = (a.q.shape, rule_k_shape(a.q.shape, logical.shape, &a.params));
    let page_size = paged.map(|p| 1usize << p.page_shift);
    let splits = resolve_splits(a.num_splits, shapes, (&split_spec, page_size), gpu)?;
    let split_spec = match paged {
        None => split_spec,
        Some(_) => KernelSpec {
            pass: Pass::FwdPaged,
            ..split_spec
        },
    };
    if b == 0 || h == 0 || sq == 0 {
        return Ok(KvPlan {
            split: LaunchPlan::noop(split_spec),
            combine: None,
            num_splits: 1,
            o_accum_len: 0,
            lse_accum_len: 0,
            scratch_bound: true,
        });
    }

    check_window_lengths(split_spec.mask, (sq, cap), "the cache's capacity")?;
    // Grid first: it names the limit users hit with huge batches or split counts.
    check_kv_grid([b, sq, h, hk], split_spec.tiles().block_m(), splits)?;
    let (sq32, cap32) = (u32_of(sq, "seqlen_q")?, capacity_of(cap)?);
    let (b32, h32, hk32) = (b as u32, h as u32, hk as u32); // checked with the grid

    let q = place("q", &a.q, false)?;
    let o = place("o", &a.o, true)?;
    let (k, v) = if cap == 0 {
        (Placed::default(), Placed::default()) // nothing of k or v is read
    } else {
        if paged.is_some() {
            check_pool_strides(kn, &a.k)?;
            check_pool_strides(vn, &a.v)?;
        }
        (place(kn, &a.k, false)?, place(vn, &a.v, false)?)
    };
    let (k, v) = (Placed { ptr: a.k.ptr, ..k }, Placed { ptr: a.v.ptr, ..v });
    let lse = match &a.lse {
        None => 0,
        Some(l) => check_lse(l, b, h, sq)?,
    };
    let seqlens = match &a.seqlens_k {
        None => 0,
        Some(s) => check_seqlens(s, b)?,
    };
    let pages = paged.unwrap_or(PagedCache {
        capacity: cap,
        table: 0,
        max_pages: 0,
        page_shift: 0,
        num_pages: 0,
    });

    let tensors = [(&abi::Q, q), (&abi::K, k), (&abi::V, v), (&abi::O, o)];
    let value = |name: &str| {
        use ParamValue::{F32, U32, U64};
        let modifier = || modifier_param(&a.params, slopes, name);
        if let Some(t) = tensor_param(name, &tensors).or_else(modifier) {
            return Some(t);
        }
        Some(match name {
            "lse" => U64(lse),
            "o_accum" | "lse_accum" => U64(0), // bound by KvPlan::bind_scratch
            "seqlens_k" => U64(seqlens),
            "seqlen_q" => U32(sq32),
            "seqlen_k" => U32(cap32),
            "head_dim" => U32(d as u32),
            "heads" => U32(h32),
            "heads_per_kv" => U32(h32 / hk32),
            "scale_log2" => F32((scale * std::f64::consts::LOG2_E) as f32),
            "num_splits" => U32(splits),
            "block_table" => U64(pages.table),
            "max_pages" => U32(pages.max_pages),
            "page_shift" => U32(pages.page_shift),
            "num_pages" => U32(pages.num_pages),
            _ => return None,
        })
    };
    let g = split_grid(&split_spec, [b32, sq32, h32, hk32], splits);
    let split = launch(split_spec, g, bind_spec_params(&split_spec, value)?);
    let combine = match splits {
        1 => None,
        _ => {
            let s = spec(Pass::FwdCombine, Mask::None).for_splits(splits);
            let g = combine_grid(&s, [b32, sq32, h32]);
            Some(launch(s, g, bind_params(Pass::FwdCombine, value)?))
        }
    };
    let (o_accum_len, lse_accum_len) = match splits {
        1 => (0, 0),
        n => {
            let rows = prod(&[n as usize, b, h, sq]);
            (rows.saturating_mul(kernel_d as usize), rows)
        }
    };
    Ok(KvPlan {
        split,
        combine,
        num_splits: splits,
        o_accum_len,
        lse_accum_len,
        scratch_bound: splits == 1,
    })
}
