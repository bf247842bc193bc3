//! Argument checks: pure functions from shapes, strides, pointers and parameters to a launch
//! plan or a [`FlashError`]. No CUDA calls, so every rule is tested on a CPU machine (see
//! `tests/runtime_errors.rs`, `tests/runtime_errors_bwd.rs` and
//! `tests/runtime_errors_kvcache.rs`).
//!
//! [`plan_fwd`] checks a forward call, [`plan_bwd`] a backward call, [`plan_kvcache`] a
//! KV-cache (split-KV) forward call; each fills its kernels' parameters by name, in the
//! order of `flash_codegen::abi::params(pass)`.

use flash_codegen::abi::{AbiTy, TensorArgs, params as abi_params};
use flash_codegen::{DType, KernelSpec, Pass};
use std::f64::consts::LOG2_E;

use crate::error::{FlashError, Result};

mod bwd;
mod bwd_split;
mod fwd;
mod kvcache;
mod layout;
mod modifiers;
mod paged;
mod sm90;
mod split_rule;
mod varlen;
pub use bwd::{
    BwdArgs, BwdPlan, ScratchDesc, ScratchNeed, ZeroFill, plan_bwd, plan_bwd_fill, plan_bwd_on,
    plan_bwd_with,
};
pub use bwd_split::{
    LONG_MIN_WINDOW_REACH, SPLIT_TARGET_CTAS_PER_SM, bwd_scratch_need, group_split_shift, rule_rows,
};
pub use fwd::{FwdArgs, plan_fwd, plan_fwd_on};
pub use kvcache::{KvArgs, KvPlan, MAX_CAPACITY, plan_kvcache};
pub use layout::contiguous_runs;
pub use modifiers::AlibiDesc;
pub(crate) use modifiers::check_alibi_kernels;
pub use paged::PagedDesc;
pub use sm90::{
    SM90_MAX_SEQLEN, Sm90FwdCall, Sm90Out, Sm90Runtime, Sm90ScoreArgs, TmaSource, sm90_fwd_call,
    sm90_fwd_call_with,
};
pub use split_rule::{GpuFill, kvcache_splits, num_splits_for, num_splits_for_paged};
pub use varlen::{
    VarlenDesc, plan_bwd_varlen, plan_bwd_varlen_fill, plan_bwd_varlen_on, plan_fwd_varlen,
    varlen_scratch,
};

/// Largest grid x dimension.
pub const MAX_GRID_X: u64 = (1 << 31) - 1;
/// Largest grid y and z dimensions.
pub const MAX_GRID_YZ: u64 = 65535;

/// What the checks need to know about one of q, k, v, o (and dO, dq, dk, dv).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    /// `[batch, seqlen, heads, head_dim]`.
    pub shape: [usize; 4],
    /// Strides in elements.
    pub strides: [usize; 4],
    /// Device address of element `(0, 0, 0, 0)`.
    pub ptr: u64,
    /// Elements available from `ptr` on (the device view's length).
    pub len: usize,
    /// Element type.
    pub dtype: DType,
}

impl TensorDesc {
    /// The same tensor at device address `ptr`.
    pub fn with_ptr(self, ptr: u64) -> Self {
        TensorDesc { ptr, ..self }
    }
}

/// A plain f32 device buffer: lse `[batch, heads, seqlen_q]`, or backward scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufDesc {
    /// Device address.
    pub ptr: u64,
    /// Elements available from `ptr` on.
    pub len: usize,
}

/// The forward's optional lse output (f32 `[batch, heads, seqlen_q]`).
pub type LseDesc = BufDesc;

/// One kernel argument value, typed as the PTX `.param` is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    /// `.u64` (pointers, batch strides).
    U64(u64),
    /// `.u32` (lengths, row/head strides).
    U32(u32),
    /// `.f32` (scale_log2, softmax_scale).
    F32(f32),
}

impl ParamValue {
    /// The PTX type name (`u64`, `u32`, `f32`): the manifest name ([`AbiTy::name`]) of the
    /// parameter types it [`fits`](ParamValue::fits).
    pub fn ty(&self) -> &'static str {
        match self {
            ParamValue::U64(_) => "u64",
            ParamValue::U32(_) => "u32",
            ParamValue::F32(_) => "f32",
        }
    }

    /// Whether this value is an argument of ABI type `ty`: a `U64` for a pointer or a
    /// `u64`, a `U32` for a `u32`, an `F32` for an `f32` (the runtime passes no tensor map).
    pub fn fits(&self, ty: AbiTy) -> bool {
        matches!(
            (self, ty),
            (ParamValue::U64(_), AbiTy::Ptr | AbiTy::U64)
                | (ParamValue::U32(_), AbiTy::U32)
                | (ParamValue::F32(_), AbiTy::F32)
        )
    }

    /// The value's type in words, for messages (`a u64`, `a u32`, `an f32`).
    pub fn what(&self) -> &'static str {
        match self {
            ParamValue::U64(_) => "a u64",
            ParamValue::U32(_) => "a u32",
            ParamValue::F32(_) => "an f32",
        }
    }
}

/// One checked kernel launch: which kernel, its geometry and its arguments in ABI order.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// The kernel variant to run.
    pub spec: KernelSpec,
    /// Grid (see `flash_codegen::abi::grid`); all zeros when there is nothing to do.
    pub grid: [u32; 3],
    /// Block `[threads, 1, 1]`.
    pub block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub smem_bytes: u32,
    /// `(name, value)` in the order of `flash_codegen::abi::params(spec.pass)`; empty for a
    /// no-op.
    pub params: Vec<(&'static str, ParamValue)>,
}

/// A checked forward launch.
pub type FwdPlan = LaunchPlan;

impl LaunchPlan {
    /// A plan that launches nothing (grid all zeros, no parameters).
    pub(crate) fn noop(spec: KernelSpec) -> Self {
        LaunchPlan {
            spec,
            grid: [0; 3],
            block: [spec.tiles().threads(), 1, 1],
            smem_bytes: spec.smem_bytes(),
            params: Vec::new(),
        }
    }

    /// True when the problem is empty and nothing must be launched.
    pub fn is_noop(&self) -> bool {
        self.grid.contains(&0)
    }

    /// The value of the named parameter.
    pub fn param(&self, name: &str) -> Option<ParamValue> {
        self.params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }
}

pub(crate) fn shape_err(msg: String) -> FlashError {
    FlashError::ShapeMismatch(msg)
}

pub(crate) fn u32_of(x: usize, what: &str) -> Result<u32> {
    u32::try_from(x).map_err(|_| shape_err(format!("{what} = {x} does not fit in u32")))
}

/// `a * b * c`, saturating (a saturated count is then larger than any buffer).
pub(crate) fn prod(xs: &[usize]) -> usize {
    xs.iter().fold(1usize, |a, &x| a.saturating_mul(x))
}

/// Every tensor of `list` has q's dtype `dtype`.
pub(crate) fn check_dtypes(dtype: DType, list: &[(&'static str, &TensorDesc)]) -> Result<()> {
    for (name, t) in list {
        if t.dtype != dtype {
            return Err(FlashError::DTypeMismatch {
                tensor: name,
                expected: dtype,
                found: t.dtype,
            });
        }
    }
    Ok(())
}

/// Checks shared by every pass: q `[b, sq, h, d]` vs k `[b, sk, hk, d]` agree on batch and
/// head dim, `d` has a kernel, `h % hk == 0`, the scale is finite. Returns the kernel head dim
/// and the softmax scale (default `1 / sqrt(d)`).
pub(crate) fn check_problem(
    q: &TensorDesc,
    k: &TensorDesc,
    softmax_scale: Option<f32>,
) -> Result<(u32, f64)> {
    let [b, _, h, d] = q.shape;
    let [bk, _, hk, dk] = k.shape;
    if bk != b || dk != d {
        return Err(shape_err(format!(
            "q {:?} and k {:?} must agree on batch (dim 0) and head_dim (dim 3)",
            q.shape, k.shape
        )));
    }
    let kernel_d = u32::try_from(d)
        .ok()
        .and_then(KernelSpec::kernel_head_dim)
        .ok_or(FlashError::UnsupportedHeadDim { head_dim: d })?;
    if (hk == 0 && h != 0) || (hk != 0 && h % hk != 0) {
        return Err(FlashError::HeadsNotDivisible {
            heads: h,
            heads_k: hk,
        });
    }
    let scale = match softmax_scale {
        None => 1.0 / (d as f64).sqrt(),
        // the kernels take scale * log2(e) as an f32: it must stay finite too
        Some(s) if s.is_finite() && s > 0.0 && ((s as f64) * LOG2_E).abs() < f32::MAX as f64 => {
            s as f64
        }
        Some(s) => {
            return Err(FlashError::InvalidParam(format!(
                "softmax_scale must be positive and finite, with scale * log2(e) within f32 \
                 range, got {s} (the kernels keep the row max of the raw scores, the max of \
                 the scaled ones only for a positive scale)"
            )));
        }
    };
    Ok((kernel_d, scale))
}

/// The grid `[ceil(seqlen_q / block_m), heads, batch]` must fit the hardware limits (the
/// backward's key-block grid `[ceil(seqlen_k / block_n), heads_k, batch]` is then smaller
/// in y and z, and its x fits whenever seqlen_k fits in u32).
pub(crate) fn check_grid(sq: usize, h: usize, b: usize, block_m: u32) -> Result<()> {
    let grid64 = [(sq as u64).div_ceil(block_m as u64), h as u64, b as u64];
    if grid64[0] > MAX_GRID_X || grid64[1] > MAX_GRID_YZ || grid64[2] > MAX_GRID_YZ {
        return Err(FlashError::GridTooLarge {
            grid: grid64,
            why: format!("limits are x <= {MAX_GRID_X}, y (heads) and z (batch) <= {MAX_GRID_YZ}"),
        });
    }
    Ok(())
}

/// A checked tensor as the kernels see it: pointer and (effective) strides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placed {
    pub ptr: u64,
    pub batch: u64,
    pub row: u32,
    pub head: u32,
}

/// Layout checks of a non-empty tensor (`output`: its elements must not share memory).
pub(crate) fn place(name: &'static str, t: &TensorDesc, output: bool) -> Result<Placed> {
    let (row, head) = layout::check_tensor(name, t, output)?;
    Ok(Placed {
        ptr: t.ptr,
        batch: layout::effective_strides(t)[0] as u64,
        row,
        head,
    })
}

/// The value of `{t}`, `{t}_batch_stride`, `{t}_row_stride` or `{t}_head_stride` for a
/// tensor `t` of `tensors`.
pub(crate) fn tensor_param(name: &str, tensors: &[(&TensorArgs, Placed)]) -> Option<ParamValue> {
    tensors.iter().find_map(|(t, p)| match name {
        n if n == t.ptr.name() => Some(ParamValue::U64(p.ptr)),
        n if n == t.batch_stride.name() => Some(ParamValue::U64(p.batch)),
        n if n == t.row_stride.name() => Some(ParamValue::U32(p.row)),
        n if n == t.head_stride.name() => Some(ParamValue::U32(p.head)),
        _ => None,
    })
}

/// The parameters of `pass` in ABI order, each from `value` by name; a name the runtime
/// does not know, or a type that differs from the ABI's, is an internal error.
pub(crate) fn bind_params(
    pass: Pass,
    value: impl Fn(&str) -> Option<ParamValue>,
) -> Result<Vec<(&'static str, ParamValue)>> {
    bind_descs(pass, abi_params(pass), value)
}

/// [`bind_params`] for `spec`'s kernel: its pass's parameters and its mask's
/// (`flash_codegen::abi::params_of`).
pub(crate) fn bind_spec_params(
    spec: &KernelSpec,
    value: impl Fn(&str) -> Option<ParamValue>,
) -> Result<Vec<(&'static str, ParamValue)>> {
    bind_descs(spec.pass, &flash_codegen::abi::params_of(spec), value)
}

fn bind_descs(
    pass: Pass,
    descs: &[flash_codegen::abi::ParamDesc],
    value: impl Fn(&str) -> Option<ParamValue>,
) -> Result<Vec<(&'static str, ParamValue)>> {
    let mut out = Vec::with_capacity(descs.len());
    for p in descs {
        let v = value(p.name).ok_or_else(|| {
            FlashError::Internal(format!(
                "{} ABI parameter `{}` is unknown to the runtime",
                pass.name(),
                p.name
            ))
        })?;
        if !v.fits(p.ty) {
            return Err(FlashError::Internal(format!(
                "{} ABI parameter `{}` is {} in flash-codegen but {} in the runtime",
                pass.name(),
                p.name,
                p.ty.what(),
                v.what()
            )));
        }
        out.push((p.name, v));
    }
    Ok(out)
}

/// A launch of `spec` on `grid` with `params`.
pub(crate) fn launch(
    spec: KernelSpec,
    grid: [u32; 3],
    params: Vec<(&'static str, ParamValue)>,
) -> LaunchPlan {
    LaunchPlan {
        grid,
        params,
        ..LaunchPlan::noop(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each value fits the ABI types of its width and class, and no value fits a tensor map.
    #[test]
    fn values_fit_their_abi_types() {
        let values = [ParamValue::U64(1), ParamValue::U32(1), ParamValue::F32(1.0)];
        for v in values {
            let fits: Vec<AbiTy> = AbiTy::ALL.into_iter().filter(|&t| v.fits(t)).collect();
            for t in &fits {
                assert_eq!(v.ty(), t.name(), "{v:?}");
            }
            let want = match v {
                ParamValue::U64(_) => vec![AbiTy::Ptr, AbiTy::U64],
                ParamValue::U32(_) => vec![AbiTy::U32],
                ParamValue::F32(_) => vec![AbiTy::F32],
            };
            assert_eq!(fits, want);
        }
    }

    /// A value of the wrong type is an internal error naming the parameter and both types.
    #[test]
    fn a_mistyped_parameter_is_named() {
        let err = bind_params(Pass::BwdPost, |name| {
            Some(match name {
                "seqlen_q" => ParamValue::F32(1.0),
                _ => ParamValue::U64(0),
            })
        })
        .unwrap_err();
        let FlashError::Internal(msg) = err else {
            panic!("{err:?}")
        };
        assert_eq!(
            msg,
            "bwdpost ABI parameter `seqlen_q` is a u32 in flash-codegen but an f32 in the runtime"
        );
    }
}
