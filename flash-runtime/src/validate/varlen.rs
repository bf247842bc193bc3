//! Varlen (packed sequences) checks: a packed call is checked as the dense call of one
//! batch of `total` rows (q `[1, total_q, h, d]`, k and v `[1, total_k, hk, d]`: every
//! layout, dtype, head and lse rule of [`super::plan_fwd`] and [`super::plan_bwd`]), then
//! planned on the varlen kernels with the offsets' own checks: `cu_seqlens_q` and
//! `cu_seqlens_k` hold `batch + 1` i32 each, 4-byte aligned; `max_seqlen_*` bound the grid.
//! Their contents are device data and are not read: the kernels clamp them
//! ([`flash_codegen::abi::varlen`]).

use flash_codegen::abi::{grid, varlen::accum_rows};
use flash_codegen::{Arch, KernelSpec, Mask, Pass, Tiling};

use super::bwd::check_scratch;
use super::modifiers::{AlibiDesc, call_scores};
use super::split_rule::GpuFill;
use super::{
    BufDesc, BwdArgs, BwdPlan, FwdArgs, LaunchPlan, MAX_GRID_YZ, ParamValue, ScratchNeed,
    bind_spec_params, check_grid, launch, plan_bwd_on, plan_fwd_on, prod, shape_err, u32_of,
};
use crate::error::{FlashError, Result};
use crate::params::AttnParams;

/// The offsets of a packed batch: i32 `[batch + 1]` device buffers and the longest
/// sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VarlenDesc {
    /// `cu_seqlens_q`: sequence `b`'s queries are rows `cu[b] .. cu[b + 1]`.
    pub cu_seqlens_q: BufDesc,
    /// `cu_seqlens_k`, the same for keys and values.
    pub cu_seqlens_k: BufDesc,
    /// At least every sequence's query count (rows past it are not computed).
    pub max_seqlen_q: usize,
    /// At least every sequence's key count.
    pub max_seqlen_k: usize,
}

impl VarlenDesc {
    /// Sequences in the batch (checked by [`check_varlen`]).
    fn batch(&self) -> usize {
        self.cu_seqlens_q.len.saturating_sub(1)
    }
}

/// The offsets' checks and the tensors' batch dim; returns the batch.
fn check_varlen(v: &VarlenDesc, q_batch: usize, k_batch: usize) -> Result<usize> {
    if q_batch != 1 || k_batch != 1 {
        return Err(shape_err(format!(
            "varlen tensors are packed: q [1, total_q, heads, head_dim] and k, v [1, total_k, \
             heads_k, head_dim] (the sequences back to back in dim 1); got batch dims {q_batch} \
             and {k_batch}"
        )));
    }
    let (cq, ck) = (v.cu_seqlens_q, v.cu_seqlens_k);
    if cq.len == 0 || cq.len != ck.len {
        return Err(shape_err(format!(
            "cu_seqlens_q and cu_seqlens_k must both hold batch + 1 i32 offsets; got {} and {}",
            cq.len, ck.len
        )));
    }
    for (name, b) in [("cu_seqlens_q", cq), ("cu_seqlens_k", ck)] {
        if b.ptr == 0 || b.ptr % 4 != 0 {
            return Err(FlashError::Misaligned {
                tensor: name,
                why: format!("its pointer {:#x} is null or not 4-byte aligned", b.ptr),
            });
        }
    }
    let batch = v.batch();
    if batch as u64 > MAX_GRID_YZ {
        return Err(FlashError::GridTooLarge {
            grid: [0, 0, batch as u64],
            why: format!("a varlen batch holds at most {MAX_GRID_YZ} sequences (grid z)"),
        });
    }
    u32_of(v.max_seqlen_q, "max_seqlen_q")?;
    u32_of(v.max_seqlen_k, "max_seqlen_k")?;
    Ok(batch)
}

/// The value of a varlen kernel's parameter `name`: the offsets and totals, else the
/// dense launch's value of the same name (`seqlen_q` of the dense call is `total_q`).
fn varlen_value(
    dense: &LaunchPlan,
    v: &VarlenDesc,
    name: &str,
    scratch: (u64, u64),
) -> Option<ParamValue> {
    use ParamValue::{U32, U64};
    Some(match name {
        "cu_seqlens_q" => U64(v.cu_seqlens_q.ptr),
        "cu_seqlens_k" => U64(v.cu_seqlens_k.ptr),
        "total_q" => dense.param("seqlen_q")?,
        "total_k" => dense.param("seqlen_k").unwrap_or(U32(0)),
        "dvec" => U64(scratch.0),
        "dq_accum" => U64(scratch.1),
        n => dense.param(n)?,
    })
}

/// `dense` as its varlen kernel on the packed batch's grid, on the row of a GPU of
/// compute capability `cc` and `gpu`'s shared memory per block; the backward main pass
/// by shared memory per SM too ([`KernelSpec::for_smem_per_sm`]).
fn to_varlen(
    dense: &LaunchPlan,
    v: &VarlenDesc,
    (batch, h, hk): (usize, usize, usize),
    scratch: (u64, u64),
    (cc, gpu): ((u32, u32), GpuFill),
) -> Result<LaunchPlan> {
    let pass = dense.spec.pass.varlen().ok_or_else(|| {
        FlashError::Internal(format!("{} has no varlen pass", dense.spec.pass.name()))
    })?;
    let spec = KernelSpec {
        pass,
        tiling: Tiling::Standard,
        ..dense.spec
    }
    .for_compute_capability(cc)
    .for_smem(gpu.smem_optin);
    let spec = match pass {
        Pass::BwdVarlen => spec.for_smem_per_sm(gpu.smem_per_sm, gpu.smem_optin),
        _ => spec,
    };
    // (sizes checked by the dense plan and `check_varlen`: each fits u32)
    let (mq, mk) = (v.max_seqlen_q as u32, v.max_seqlen_k as u32);
    let g = grid(&spec, batch as u32, mq, mk, h as u32, hk as u32)
        .ok_or_else(|| FlashError::Internal(format!("{spec} has no grid")))?;
    check_grid(v.max_seqlen_q, h, batch, spec.tiles().block_m())?;
    let params = bind_spec_params(&spec, |n| varlen_value(dense, v, n, scratch))?;
    Ok(launch(spec, g, params))
}

/// A packed call's ALiBi slopes, checked against its `batch` sequences (`[heads]` or
/// `[batch, heads]`), as its dense plan (batch 1) takes them: `[batch, heads]` slopes
/// become one sequence's `heads` values with the same stride (`heads`), which the kernels
/// index by their sequence.
fn packed_alibi(
    params: &AttnParams,
    alibi: Option<&AlibiDesc>,
    (pass, mask): (Pass, Mask),
    batch: usize,
    heads: usize,
) -> Result<Option<AlibiDesc>> {
    let Some(a) = alibi else {
        return Ok(None);
    };
    call_scores(params, Some(a), (pass, mask), (batch, heads))?;
    let slopes = BufDesc {
        len: heads,
        ..a.slopes
    };
    Ok(Some(AlibiDesc { slopes, ..*a }))
}

/// Check a varlen forward and plan its launch: `a` describes the packed tensors (batch
/// dim 1), `v` the offsets.
pub fn plan_fwd_varlen(
    a: &FwdArgs,
    v: &VarlenDesc,
    arch: Arch,
    smem_optin: u64,
) -> Result<LaunchPlan> {
    let batch = check_varlen(v, a.q.shape[0], a.k.shape[0])?;
    // (before the dense checks, which would take ALiBi, and the empty-batch return: what
    // has no varlen kernel is an error whatever the sizes)
    let mask = a.params.kernel_mask_for(Pass::FwdVarlen)?;
    let alibi = packed_alibi(
        &a.params,
        a.alibi.as_ref(),
        (Pass::FwdVarlen, mask),
        batch,
        a.q.shape[2],
    )?;
    let dense = plan_fwd_on(&FwdArgs { alibi, ..*a }, arch, smem_optin)?;
    if dense.is_noop() || batch == 0 || v.max_seqlen_q == 0 {
        return Ok(LaunchPlan::noop(KernelSpec {
            pass: Pass::FwdVarlen,
            tiling: Tiling::Standard,
            ..dense.spec
        }));
    }
    let heads = (batch, a.q.shape[2], a.k.shape[2]);
    // (no varlen forward has a wide row: its standard one for any GPU)
    to_varlen(
        &dense,
        v,
        heads,
        (0, 0),
        (arch.min_compute_capability(), GpuFill::per_block(u64::MAX)),
    )
}

/// The scratch of a varlen backward: D `[heads, total_q]` and, in atomic mode, the dq
/// accumulator of `heads * 16 ceil((total_q + 16 batch) / 16) * head_dim` f32.
pub fn varlen_scratch(q_shape: [usize; 4], batch: usize, deterministic: bool) -> ScratchNeed {
    let [_, total_q, h, d] = q_shape;
    ScratchNeed {
        dvec: prod(&[h, total_q]),
        dq_accum: match deterministic {
            true => 0,
            false => prod(&[h, accum_rows(total_q, batch), d]),
        },
        dkv_partial: 0,
    }
}

/// Check a varlen backward and plan its launches (scratch `None`: a dry run, as
/// [`super::plan_bwd`]); an empty packed batch zero-fills as the dense call would.
///
/// `cc` is the GPU's compute capability: from 9.0 on, the main pass runs on its wide row
/// where it has one ([`KernelSpec::for_compute_capability`]).
pub fn plan_bwd_varlen(a: &BwdArgs, v: &VarlenDesc, arch: Arch, cc: (u32, u32)) -> Result<BwdPlan> {
    plan_bwd_varlen_on(a, v, arch, cc, u64::MAX)
}

/// [`plan_bwd_varlen`] for a GPU allowing `smem_optin` bytes of dynamic shared memory
/// per block: passes whose rows need more run on their compact rows
/// ([`KernelSpec::for_smem`]), as in [`plan_bwd_on`].
pub fn plan_bwd_varlen_on(
    a: &BwdArgs,
    v: &VarlenDesc,
    arch: Arch,
    cc: (u32, u32),
    smem_optin: u64,
) -> Result<BwdPlan> {
    plan_bwd_varlen_fill(a, v, arch, cc, GpuFill::per_block(smem_optin))
}

/// [`plan_bwd_varlen_on`] for a GPU with `gpu.smem_per_sm` bytes of shared memory per SM:
/// the main pass on its compact row where that keeps more warps per SM
/// ([`KernelSpec::for_smem_per_sm`]: an A100 at d96 and d128). (`gpu.sms` is not read:
/// the varlen backward does not split groups.)
pub fn plan_bwd_varlen_fill(
    a: &BwdArgs,
    v: &VarlenDesc,
    arch: Arch,
    cc: (u32, u32),
    gpu: GpuFill,
) -> Result<BwdPlan> {
    let batch = check_varlen(v, a.q.shape[0], a.k.shape[0])?;
    let mask = a.params.kernel_mask_for(Pass::BwdVarlen)?;
    let alibi = packed_alibi(
        &a.params,
        a.alibi.as_ref(),
        (Pass::BwdVarlen, mask),
        batch,
        a.q.shape[2],
    )?;
    if let Some(t) = a.opts.tiling {
        return Err(FlashError::InvalidParam(format!(
            "BwdOptions::tiling ({t:?}) fixes the dense backward's row; the varlen backward \
             takes its rows by compute capability and shared memory (leave it None)"
        )));
    }
    // (one group split: the varlen main pass has none)
    let dry = BwdArgs {
        scratch: None,
        alibi,
        opts: a.opts.with_group_splits(1),
        ..*a
    };
    let dense = plan_bwd_on(&dry, arch, false, gpu.smem_optin)?;
    if dense.launches.is_empty() {
        return Ok(dense);
    }
    let need = varlen_scratch(a.q.shape, batch, a.opts.deterministic);
    let scratch = match &a.scratch {
        Some(s) => check_scratch(s, &need)?,
        None => (0, 0),
    };
    let launches = match batch == 0 || v.max_seqlen_q == 0 && v.max_seqlen_k == 0 {
        true => Vec::new(),
        false => {
            // (a pass whose grid is empty, no queries or no keys anywhere, is left out: the
            // others then read nothing it would have written)
            let l = dense.launches.iter();
            let heads = (batch, a.q.shape[2], a.k.shape[2]);
            let l = l.map(|l| to_varlen(l, v, heads, scratch, (cc, gpu)));
            let l: Vec<LaunchPlan> = l.collect::<Result<_>>()?;
            l.into_iter().filter(|l| !l.is_noop()).collect()
        }
    };
    Ok(BwdPlan {
        launches,
        zero_fill: Vec::new(),
        scratch: need,
        scratch_bound: a.scratch.is_some(),
    })
}
