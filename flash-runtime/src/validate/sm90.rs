//! The sm_90a forward's rule: which forward calls may run on the Hopper kernel
//! (`flash_codegen::kernels::sm90::fwd`: wgmma, TMA) instead of the sm_80 one, and the
//! launch values of those that may. Pure (no CUDA), so every refusal is tested on a CPU
//! (`sm90/tests.rs`).
//!
//! The rule runs after [`plan_fwd_on`](super::plan_fwd_on) accepted the call, so a call
//! gets the same errors on every GPU; it repeats the few layout facts it relies on, so
//! each refusal reads on its own. A refusal is a reason, not an error: `ForwardArch::Auto`
//! runs the sm_80 forward there, `ForwardArch::Sm90a` reports it.

use flash_codegen::DType;
use flash_codegen::kernels::sm90::fwd;

use super::layout::effective_strides;
use super::{AlibiDesc, FwdArgs, TensorDesc};
use crate::fwd_sm90_shape::{Sm90FwdShape, fwd_variant};

mod modifiers;
#[cfg(test)]
mod tests;

use modifiers::modifiers;

/// What the rule needs to know of the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sm90Runtime {
    /// The compute capability calls are planned for (the GPU's, or less after
    /// `FlashAttention::limit_compute_capability`).
    pub cc: (u32, u32),
    /// Whether the runtime generates PTX (false for `FlashAttention::with_kernels`: it
    /// then runs only the sm_90a forwards registered with it, [`sm90_fwd_call_with`]).
    pub generates: bool,
    /// Dynamic shared memory per block the runtime plans for (`FlashAttention::smem_limit`).
    pub smem_optin: u64,
    /// Whether the driver encodes tensor maps (`cuTensorMapEncodeTiled`: CUDA 12.0, driver
    /// r525, or newer; the same drivers load `.version 8.0` PTX).
    pub tma: bool,
}

/// One of q, k, v as its tensor map takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TmaSource {
    /// Device address of element `(0, 0, 0, 0)`, 16-byte aligned.
    pub ptr: u64,
    /// `[batch, row, head]` strides in elements, as `TensorMapLayout::bhsd` takes them:
    /// each a non-zero multiple of 16 bytes below 2^40 bytes (a dim of size 1, never
    /// stepped over, gets the head dim: a stride TMA takes).
    pub strides: [usize; 3],
}

/// o as the kernel's stores take it (`fwd::SCALARS`: `o`, `o_row`, `o_head`, `o_batch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sm90Out {
    /// Device address of element `(0, 0, 0, 0)`.
    pub ptr: u64,
    /// Batch stride in elements (0 for a batch of one).
    pub batch: u64,
    /// Row stride in elements (0 for one row).
    pub row: u32,
    /// Head stride in elements (0 for one head).
    pub head: u32,
}

/// A forward call the sm_90a kernel runs: everything its launch takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sm90FwdCall {
    /// The kernel variant (default tiling, overlapped and pingpong schedule).
    pub variant: fwd::Variant,
    /// The problem's sizes and the schedule the variant was made from.
    pub shape: Sm90FwdShape,
    /// Queries `[b, sq, h, d]`.
    pub q: TmaSource,
    /// Keys `[b, sk, hk, d]`.
    pub k: TmaSource,
    /// Values `[b, sk, hk, d]`.
    pub v: TmaSource,
    /// Output `[b, sq, h, d]`.
    pub o: Sm90Out,
    /// o as the TMA epilogue's tensor map (`tm_o`) takes it: `Some` exactly when
    /// `variant.tma_store`.
    pub o_tma: Option<TmaSource>,
    /// The lse output's address (f32 `[b, h, sq]`, contiguous), 0 for none.
    pub lse: u64,
    /// Softmax scale * log2(e), as the sm_80 plan computes it.
    pub scale_log2: f32,
    /// The score transform's values (`shape.scores`).
    pub scores: Sm90ScoreArgs,
}

/// The score transform's launch values (`fwd::Variant::scores`): the cap, or ALiBi's
/// slopes; zeros for plain scores.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sm90ScoreArgs {
    /// The softcap's cap (finite, > 0), for `Scores::Softcap`.
    pub softcap: f32,
    /// ALiBi's slopes (f32 device address, 4-byte aligned), for `Scores::Alibi`.
    pub slopes: u64,
    /// Slopes per batch entry: 0 for `[heads]`, heads for `[batch, heads]`.
    pub slopes_batch_stride: u32,
}

/// Longest sequence (exclusive) the kernel's signed 32-bit TMA coordinates and block
/// arithmetic take.
pub const SM90_MAX_SEQLEN: usize = (1 << 31) - 256;

/// The sm_90a forward's launch values for call `a` on runtime `rt`, or why the kernel
/// cannot run it (a reason naming what refused and what the kernel takes):
///
/// - the runtime: it plans for compute capability exactly 9.0, and it generates code (this
///   function: an embedded-only runtime has no sm_90a kernel; [`sm90_fwd_call_with`] takes
///   the registered ones);
/// - the problem: head dim 64 or 128 (`fwd::HEAD_DIMS`; f16 and bf16 both run); no
///   mask, causal or a sliding window (a window `(-1, -1)` or `(-1, 0)` counts as none or
///   causal, as the sm_80 plan normalises it); a softcap (finite, > 0) under any of them,
///   or ALiBi (slopes `[heads]` or `[batch, heads]`, 4-byte aligned) without a window,
///   not both; any positive,
///   finite softmax scale (the kernel takes scale * log2 e); at least one key; sequences
///   shorter than 2^31 - 256; heads a multiple of heads_k; a non-empty problem;
/// - q, k, v (read through TMA tensor maps): head_dim stride 1, every other stride of a
///   dim longer than 1 a non-zero multiple of 16 bytes below 2^40 bytes, base pointer
///   16-byte aligned;
/// - o (written through a TMA tensor map by the shipping kernels, `tma_store`): as q, k,
///   v; and, as the pair stores take it (the kernel's o parameters), row and head
///   strides within u32;
/// - shared memory: the variant's within the runtime's per-block limit.
pub fn sm90_fwd_call(a: &FwdArgs, rt: Sm90Runtime) -> Result<Sm90FwdCall, String> {
    sm90_fwd_call_with(a, rt, &|_| false)
}

/// [`sm90_fwd_call`] for a runtime whose registered sm_90a forwards `embedded` tells (by
/// variant; `FlashAttention::register_sm90a_kernels`): a runtime that does not generate
/// code takes the call only when the variant it needs is registered, and otherwise says
/// which kernel is missing and what to add to the `flash_kernel!` invocation.
pub fn sm90_fwd_call_with(
    a: &FwdArgs,
    rt: Sm90Runtime,
    embedded: &dyn Fn(&fwd::Variant) -> bool,
) -> Result<Sm90FwdCall, String> {
    if rt.cc != (9, 0) {
        let (major, minor) = rt.cc;
        return Err(format!(
            "compute capability {major}.{minor} (the GPU's, or \
             FlashAttention::limit_compute_capability's): the sm_90a forward runs on 9.0 \
             (H100, H200) only"
        ));
    }
    if !rt.tma {
        return Err(
            "this CUDA driver has no cuTensorMapEncodeTiled (the sm_90a forward \
                    needs CUDA 12.0, driver r525, or newer)"
                .into(),
        );
    }
    let dtype = a.q.dtype;
    match dtype {
        DType::F16 | DType::Bf16 => {} // the kernel has both
    }
    let [b, sq, h, d] = a.q.shape;
    let [_, sk, hk, _] = a.k.shape;
    let head_dim = u32::try_from(d).ok().filter(|d| fwd::HEAD_DIMS.contains(d));
    if head_dim.is_none() {
        return Err(format!(
            "head dim {d}: the sm_90a forward takes {}",
            head_dims()
        ));
    }
    let mods = modifiers(a, (b, h, d))?;
    if sk == 0 {
        return Err("seqlen_k 0: the sm_90a forward needs at least one key".into());
    }
    if sq.max(sk) >= SM90_MAX_SEQLEN {
        return Err(format!(
            "seqlen_q {sq}, seqlen_k {sk}: the sm_90a forward takes sequences shorter than \
             2^31 - 256 (signed 32-bit TMA coordinates)"
        ));
    }
    if hk == 0 || h % hk != 0 {
        return Err(format!(
            "heads {h}, heads_k {hk}: heads must be a non-zero multiple of heads_k"
        ));
    }
    if b == 0 || sq == 0 || h == 0 {
        return Err(format!(
            "batch {b}, seqlen_q {sq}, heads {h}: an empty problem launches nothing"
        ));
    }
    let (q, k, v) = (
        tma_source("q", &a.q, d)?,
        tma_source("k", &a.k, d)?,
        tma_source("v", &a.v, d)?,
    );
    let o = out(&a.o)?;
    let ship = fwd::Variant::shipping_for(dtype, d as u32, mods.mask);
    let sizes = (b, sq, sk, h, hk, d);
    let shape = Sm90FwdShape::on(&ship, sizes, a.params.window_params(), mods.scores);
    let variant = fwd_variant(dtype, &shape).map_err(|e| e.to_string())?;
    if !rt.generates && !embedded(&variant) {
        return Err(format!(
            "this runtime runs embedded kernels only (FlashAttention::with_kernels) and the \
             sm_90a kernel `{}` is not among them: {}",
            variant.name(),
            crate::embedded::missing_sm90a_hint(&variant)
        ));
    }
    // the TMA epilogue stores o through a tensor map, as q is read (`plan_fwd_on` took o
    // only with 8-element strides and a 16-byte base: this restates what the map needs)
    let o_tma = match variant.tma_store {
        true => Some(tma_source("o", &a.o, d)?),
        false => None,
    };
    if u64::from(variant.smem_bytes()) > rt.smem_optin {
        return Err(format!(
            "{} needs {} bytes of shared memory per block, this runtime plans for {} \
             (FlashAttention::limit_smem)",
            variant.name(),
            variant.smem_bytes(),
            rt.smem_optin
        ));
    }
    Ok(Sm90FwdCall {
        variant,
        shape,
        q,
        k,
        v,
        o,
        o_tma,
        lse: a.lse.map_or(0, |l| l.ptr),
        scale_log2: mods.scale_log2,
        scores: mods.args,
    })
}

/// `fwd::HEAD_DIMS` in words ("64 and 128").
fn head_dims() -> String {
    fwd::HEAD_DIMS.map(|d| d.to_string()).join(" and ")
}

/// q, k or v as its tensor map takes it, or why TMA cannot.
fn tma_source(name: &str, t: &TensorDesc, d: usize) -> Result<TmaSource, String> {
    if t.strides[3] != 1 {
        return Err(format!(
            "{name}'s head_dim stride is {}: the sm_90a forward's tensor maps read rows with \
             stride 1",
            t.strides[3]
        ));
    }
    let bytes = t.dtype.size() as u128;
    let mut strides = [0usize; 3];
    for (i, dim) in ["batch", "row", "head"].into_iter().enumerate() {
        let s = t.strides[i];
        strides[i] = match (t.shape[i], s as u128 * bytes) {
            (1, _) => d, // never stepped over: any stride TMA takes
            (_, 0) => {
                return Err(format!(
                    "{name}'s {dim} stride is 0 (a broadcast view): TMA takes non-zero strides"
                ));
            }
            (_, n) if !n.is_multiple_of(16) => {
                return Err(format!(
                    "{name}'s {dim} stride is {s} elements ({n} bytes): TMA takes strides \
                     that are multiples of 16 bytes"
                ));
            }
            (_, n) if n >= 1 << 40 => {
                return Err(format!(
                    "{name}'s {dim} stride is {n} bytes: TMA takes strides below 2^40 bytes"
                ));
            }
            _ => s,
        };
    }
    if !t.ptr.is_multiple_of(16) {
        return Err(format!(
            "{name}'s base pointer {:#x}: TMA takes 16-byte aligned ones",
            t.ptr
        ));
    }
    Ok(TmaSource {
        ptr: t.ptr,
        strides,
    })
}

/// o as the kernel's 4-byte pair stores take it, or why they cannot.
fn out(t: &TensorDesc) -> Result<Sm90Out, String> {
    let s = effective_strides(t);
    if s[3] != 1 {
        return Err(format!(
            "o's head_dim stride is {}: the sm_90a forward stores pairs of adjacent elements \
             (stride 1)",
            s[3]
        ));
    }
    if !t.ptr.is_multiple_of(4) || s[..3].iter().any(|x| !x.is_multiple_of(2)) {
        return Err(format!(
            "o's base pointer {:#x} and strides {s:?}: the sm_90a forward's 4-byte pair stores \
             take a 4-byte aligned pointer and even strides",
            t.ptr
        ));
    }
    let (Ok(row), Ok(head)) = (u32::try_from(s[1]), u32::try_from(s[2])) else {
        return Err(format!(
            "o's row stride {} and head stride {}: the sm_90a forward takes them within u32",
            s[1], s[2]
        ));
    };
    Ok(Sm90Out {
        ptr: t.ptr,
        batch: s[0] as u64,
        row,
        head,
    })
}
