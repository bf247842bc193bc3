//! Forward checks.
//!
//! Edge cases: an empty batch, zero heads or `seqlen_q == 0` plan nothing to launch.
//! `seqlen_k == 0` with `seqlen_q > 0` *is launched*: the kernel treats every row as fully
//! masked and writes `o = 0`, `lse = -inf` without reading k or v (chosen over a host-side
//! fill because `o` may be strided, which no single memset covers).

use flash_codegen::abi::{self, fwd_grid};
use flash_codegen::{Arch, KernelSpec, Pass, Tiling};

use super::modifiers::{AlibiDesc, call_scores, check_window_lengths, modifier_param};
use super::{
    LaunchPlan, LseDesc, ParamValue, Placed, TensorDesc, bind_spec_params, check_dtypes,
    check_grid, check_problem, launch, place, prod, shape_err, tensor_param, u32_of,
};
use crate::error::{FlashError, Result};
use crate::params::AttnParams;

/// All arguments of a forward call, as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FwdArgs<'a> {
    /// Queries `[b, sq, h, d]`.
    pub q: TensorDesc,
    /// Keys `[b, sk, hk, d]`.
    pub k: TensorDesc,
    /// Values `[b, sk, hk, d]`.
    pub v: TensorDesc,
    /// Output `[b, sq, h, d]`.
    pub o: TensorDesc,
    /// Optional log-sum-exp output.
    pub lse: Option<LseDesc>,
    /// Mask, scale and modifiers.
    pub params: AttnParams<'a>,
    /// ALiBi's slopes (the buffer of `params.alibi`), or `None`.
    pub alibi: Option<AlibiDesc>,
}

/// Checks of the lse buffer `[batch, heads, seqlen_q]` (f32, contiguous); returns its pointer.
pub(crate) fn check_lse(l: &LseDesc, b: usize, h: usize, sq: usize) -> Result<u64> {
    let need = prod(&[b, h, sq]);
    if l.len < need {
        return Err(shape_err(format!(
            "lse must hold batch * heads * seqlen_q = {need} f32 values \
             ([batch, heads, seqlen_q], contiguous) but its buffer holds {}",
            l.len
        )));
    }
    if l.ptr % 4 != 0 || l.ptr == 0 {
        return Err(FlashError::Misaligned {
            tensor: "lse",
            why: format!("its pointer {:#x} is null or not 4-byte aligned", l.ptr),
        });
    }
    Ok(l.ptr)
}

/// Check a forward call and plan its launch (kernels of `arch`, standard tiling).
pub fn plan_fwd(a: &FwdArgs, arch: Arch) -> Result<LaunchPlan> {
    plan_fwd_on(a, arch, u64::MAX)
}

/// [`plan_fwd`] for a GPU allowing `smem_optin` bytes of dynamic shared memory per
/// block: a kernel whose standard row needs more runs on its compact row where it has
/// one ([`KernelSpec::for_smem`]: the d256 forward on RTX 30/40), same grid.
pub fn plan_fwd_on(a: &FwdArgs, arch: Arch, smem_optin: u64) -> Result<LaunchPlan> {
    let dtype = a.q.dtype;
    check_dtypes(dtype, &[("k", &a.k), ("v", &a.v), ("o", &a.o)])?;
    let [b, sq, h, d] = a.q.shape;
    let [_, sk, hk, _] = a.k.shape;
    if a.v.shape != a.k.shape {
        return Err(shape_err(format!(
            "v has shape {:?} but k has {:?}; both must be [batch, seqlen_k, heads_k, head_dim]",
            a.v.shape, a.k.shape
        )));
    }
    if a.o.shape != a.q.shape {
        return Err(shape_err(format!(
            "o has shape {:?} but q has {:?}; o must be [batch, seqlen_q, heads, head_dim] like q",
            a.o.shape, a.q.shape
        )));
    }
    let (kernel_d, scale) = check_problem(&a.q, &a.k, a.params.softmax_scale)?;
    let mask = a.params.kernel_mask_for(Pass::Fwd)?;
    let (scores, slopes) = call_scores(&a.params, a.alibi.as_ref(), (Pass::Fwd, mask), (b, h))?;
    let spec = KernelSpec {
        pass: Pass::Fwd,
        head_dim: kernel_d,
        dtype,
        mask,
        scores,
        tiling: Tiling::Standard,
        arch,
    }
    .for_smem(smem_optin);
    if b == 0 || h == 0 || sq == 0 {
        return Ok(LaunchPlan::noop(spec));
    }

    check_window_lengths(spec.mask, (sq, sk), "seqlen_k")?;
    // Grid first: it names the limit users hit with huge batches or head counts.
    check_grid(sq, h, b, spec.tiles().block_m())?;
    let (sq32, sk32, h32) = (u32_of(sq, "seqlen_q")?, u32_of(sk, "seqlen_k")?, h as u32);
    let grid = fwd_grid(&spec, sq32, h32, b as u32);

    let q = place("q", &a.q, false)?;
    let o = place("o", &a.o, true)?;
    let (k, v) = if sk == 0 {
        (Placed::default(), Placed::default()) // nothing of k or v is read
    } else {
        (place("k", &a.k, false)?, place("v", &a.v, false)?)
    };
    let (k, v) = (Placed { ptr: a.k.ptr, ..k }, Placed { ptr: a.v.ptr, ..v });
    let lse_ptr = match &a.lse {
        None => 0,
        Some(l) => check_lse(l, b, h, sq)?,
    };

    let tensors = [(&abi::Q, q), (&abi::K, k), (&abi::V, v), (&abi::O, o)];
    let hk_div = h.checked_div(hk).unwrap_or(1);
    let params = bind_spec_params(&spec, |name| {
        use ParamValue::{F32, U32, U64};
        let modifier = || modifier_param(&a.params, slopes, name);
        if let Some(t) = tensor_param(name, &tensors).or_else(modifier) {
            return Some(t);
        }
        Some(match name {
            "lse" => U64(lse_ptr),
            "seqlen_q" => U32(sq32),
            "seqlen_k" => U32(sk32),
            "head_dim" => U32(d as u32),
            "heads" => U32(h32),
            "heads_per_kv" => U32(hk_div as u32),
            "scale_log2" => F32((scale * std::f64::consts::LOG2_E) as f32),
            _ => return None,
        })
    })?;
    Ok(launch(spec, grid, params))
}
