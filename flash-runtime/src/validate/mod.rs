//! Argument checks for the forward pass: pure functions from shapes, strides, pointers and
//! parameters to a launch plan or a [`FlashError`]. No CUDA calls, so every rule is tested
//! on a CPU machine (see `tests/runtime_errors.rs`).
//!
//! Edge cases: an empty batch, zero heads or `seqlen_q == 0` plan nothing to launch.
//! `seqlen_k == 0` with `seqlen_q > 0` *is launched*: the kernel treats every row as fully
//! masked and writes `o = 0`, `lse = -inf` without reading k or v (chosen over a host-side
//! fill because `o` may be strided, which no single memset covers).

use flash_codegen::abi::{FWD_PARAMS, fwd_grid};
use flash_codegen::{Arch, DType, KernelSpec, Pass};

use crate::error::{FlashError, Result};

mod layout;
use layout::{check_tensor, effective_strides};

/// Largest grid x dimension.
pub const MAX_GRID_X: u64 = (1 << 31) - 1;
/// Largest grid y and z dimensions.
pub const MAX_GRID_YZ: u64 = 65535;

/// Options of a forward call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FwdParams {
    /// Causal mask, bottom-right aligned: query `i` sees keys `j <= i + seqlen_k - seqlen_q`.
    pub causal: bool,
    /// Softmax scale; `None` means `1 / sqrt(head_dim)`.
    pub softmax_scale: Option<f32>,
}

/// What the checks need to know about one of q, k, v, o.
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

/// What the checks need to know about the optional lse output (f32 `[batch, heads, seqlen_q]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LseDesc {
    /// Device address.
    pub ptr: u64,
    /// Elements available from `ptr` on.
    pub len: usize,
}

/// All arguments of a forward call, as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FwdArgs {
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
    /// Mask and scale.
    pub params: FwdParams,
}

/// One kernel argument value, typed as the PTX `.param` is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    /// `.u64` (pointers, batch strides).
    U64(u64),
    /// `.u32` (lengths, row/head strides).
    U32(u32),
    /// `.f32` (scale_log2).
    F32(f32),
}

/// A checked forward launch: which kernel, its geometry and its arguments in ABI order.
#[derive(Clone, Debug, PartialEq)]
pub struct FwdPlan {
    /// The kernel variant to run.
    pub spec: KernelSpec,
    /// Grid `[ceil(sq / block_m), heads, batch]`; all zeros when there is nothing to do.
    pub grid: [u32; 3],
    /// Block `[threads, 1, 1]`.
    pub block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub smem_bytes: u32,
    /// `(name, value)` in the order of `flash_codegen::abi::FWD_PARAMS`; empty for a no-op.
    pub params: Vec<(&'static str, ParamValue)>,
}

impl FwdPlan {
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

fn shape_err(msg: String) -> FlashError {
    FlashError::ShapeMismatch(msg)
}

fn u32_of(x: usize, what: &str) -> Result<u32> {
    u32::try_from(x).map_err(|_| shape_err(format!("{what} = {x} does not fit in u32")))
}

/// Check a forward call and plan its launch (kernels of `arch`).
pub fn plan_fwd(a: &FwdArgs, arch: Arch) -> Result<FwdPlan> {
    let dtype = a.q.dtype;
    for (name, t) in [("k", &a.k), ("v", &a.v), ("o", &a.o)] {
        if t.dtype != dtype {
            return Err(FlashError::DTypeMismatch {
                tensor: name,
                expected: dtype,
                found: t.dtype,
            });
        }
    }
    let [b, sq, h, d] = a.q.shape;
    let [bk, sk, hk, dk] = a.k.shape;
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
    if bk != b || dk != d {
        return Err(shape_err(format!(
            "q {:?} and k {:?} must agree on batch (dim 0) and head_dim (dim 3)",
            a.q.shape, a.k.shape
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
    let scale = match a.params.softmax_scale {
        None => 1.0 / (d as f64).sqrt(),
        Some(s) if s.is_finite() => s as f64,
        Some(s) => {
            return Err(FlashError::InvalidParam(format!(
                "softmax_scale must be finite, got {s}"
            )));
        }
    };
    let spec = KernelSpec {
        pass: Pass::Fwd,
        head_dim: kernel_d,
        dtype,
        causal: a.params.causal,
        arch,
    };
    let block = [spec.tiles().threads(), 1, 1];
    let smem_bytes = spec.smem_bytes();
    if b == 0 || h == 0 || sq == 0 {
        return Ok(FwdPlan {
            spec,
            grid: [0; 3],
            block,
            smem_bytes,
            params: Vec::new(),
        });
    }

    // Grid first: it names the limit users hit with huge batches or head counts.
    let block_m = spec.tiles().block_m as u64;
    let grid64 = [(sq as u64).div_ceil(block_m), h as u64, b as u64];
    if grid64[0] > MAX_GRID_X || grid64[1] > MAX_GRID_YZ || grid64[2] > MAX_GRID_YZ {
        return Err(FlashError::GridTooLarge {
            grid: grid64,
            why: format!("limits are x <= {MAX_GRID_X}, y (heads) and z (batch) <= {MAX_GRID_YZ}"),
        });
    }
    let (sq32, sk32, h32) = (u32_of(sq, "seqlen_q")?, u32_of(sk, "seqlen_k")?, h as u32);
    let grid = fwd_grid(&spec, sq32, h32, b as u32);

    let (q_row, q_head) = check_tensor("q", &a.q, false)?;
    let (o_row, o_head) = check_tensor("o", &a.o, true)?;
    let (k_row, k_head, v_row, v_head) = if sk == 0 {
        (0, 0, 0, 0) // nothing of k or v is read
    } else {
        let (kr, kh) = check_tensor("k", &a.k, false)?;
        let (vr, vh) = check_tensor("v", &a.v, false)?;
        (kr, kh, vr, vh)
    };
    let lse_ptr = match a.lse {
        None => 0,
        Some(l) => {
            let need = b
                .checked_mul(h)
                .and_then(|x| x.checked_mul(sq))
                .unwrap_or(usize::MAX);
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
            l.ptr
        }
    };

    let hk_div = h.checked_div(hk).unwrap_or(1);
    let value = |name: &str| -> Option<ParamValue> {
        use ParamValue::{F32, U32, U64};
        Some(match name {
            "q" => U64(a.q.ptr),
            "k" => U64(a.k.ptr),
            "v" => U64(a.v.ptr),
            "o" => U64(a.o.ptr),
            "lse" => U64(lse_ptr),
            "seqlen_q" => U32(sq32),
            "seqlen_k" => U32(sk32),
            "head_dim" => U32(d as u32),
            "heads" => U32(h32),
            "heads_per_kv" => U32(hk_div as u32),
            "scale_log2" => F32((scale * std::f64::consts::LOG2_E) as f32),
            "q_batch_stride" => U64(effective_strides(&a.q)[0] as u64),
            "q_row_stride" => U32(q_row),
            "q_head_stride" => U32(q_head),
            "k_batch_stride" => U64(if sk == 0 {
                0
            } else {
                effective_strides(&a.k)[0] as u64
            }),
            "k_row_stride" => U32(k_row),
            "k_head_stride" => U32(k_head),
            "v_batch_stride" => U64(if sk == 0 {
                0
            } else {
                effective_strides(&a.v)[0] as u64
            }),
            "v_row_stride" => U32(v_row),
            "v_head_stride" => U32(v_head),
            "o_batch_stride" => U64(effective_strides(&a.o)[0] as u64),
            "o_row_stride" => U32(o_row),
            "o_head_stride" => U32(o_head),
            _ => return None,
        })
    };
    let mut params = Vec::with_capacity(FWD_PARAMS.len());
    for p in FWD_PARAMS.iter() {
        let v = value(p.name).ok_or_else(|| {
            FlashError::Internal(format!("forward ABI parameter `{}` is unknown", p.name))
        })?;
        let ty = match v {
            ParamValue::U64(_) => "u64",
            ParamValue::U32(_) => "u32",
            ParamValue::F32(_) => "f32",
        };
        if ty != p.ty {
            return Err(FlashError::Internal(format!(
                "forward ABI parameter `{}` is {} in flash-codegen but {ty} in the runtime",
                p.name, p.ty
            )));
        }
        params.push((p.name, v));
    }
    Ok(FwdPlan {
        spec,
        grid,
        block,
        smem_bytes,
        params,
    })
}
