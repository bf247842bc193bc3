//! [`ForwardArch`]: which forward kernels [`FlashAttention::forward`] and
//! [`FlashAttention::forward_into`] run (the sm_90a one where it can on compute capability
//! 9.0, else the sm_80 one), and [`FlashAttention::forward_kernel_name`], which tells a
//! call's kernel.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DeviceSlice};

use crate::FlashAttention;
use crate::error::{FlashError, Result};
use crate::params::AttnParams;
use crate::tensor::{Element, Tensor4, contiguous_strides};
use crate::validate::{
    FwdArgs, Sm90FwdCall, Sm90Runtime, TensorDesc, plan_fwd_on, prod, sm90_fwd_call_with,
};

/// Which forward kernels [`FlashAttention::forward`] and [`FlashAttention::forward_into`]
/// run ([`FlashAttention::set_forward_arch`]). Both compute the same attention; every
/// check runs first either way, so a call gets the same errors on every GPU.
///
/// ```
/// use flash_runtime::ForwardArch;
/// assert_eq!(ForwardArch::default(), ForwardArch::Auto);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ForwardArch {
    /// The sm_90a forward (wgmma, TMA, warp-specialised) where it can run the call, else
    /// the sm_80 one. It can on compute capability 9.0 (H100, H200; not lowered by
    /// [`FlashAttention::limit_compute_capability`]) with a runtime that generates code or
    /// has the call's sm_90a kernel registered (a [`FlashAttention::with_kernels`] runtime:
    /// `flash_kernel!` with `arch = [sm80, sm90a]`,
    /// [`FlashAttention::register_sm90a_kernels`]) and allows its shared memory
    /// ([`FlashAttention::limit_smem`]), for head dims 64 and 128, f16 and bf16, no mask,
    /// the causal one or a sliding window, any scale, a softcap (under any mask) or ALiBi
    /// (no window), at least one key, and q, k, v whose strides (of the dims longer
    /// than one) are non-zero multiples of 16 bytes: contiguous tensors,
    /// `Tensor4::from_bhsd` views and q, k, v of a packed qkv buffer all are; any o and lse
    /// the checks accept. The default.
    #[default]
    Auto,
    /// Always the sm_80 forward (mma.sync, cp.async): every GPU from compute capability 8.0,
    /// every call the checks accept.
    Sm80,
    /// Always the sm_90a forward: a call it cannot run (see [`ForwardArch::Auto`]) fails
    /// with [`FlashError::ArchUnavailable`], which says why. For tests and benchmarks.
    Sm90a,
}

impl FlashAttention {
    /// Runs every later forward on `arch`'s kernels ([`ForwardArch`]; the default is
    /// [`ForwardArch::Auto`]). Only the dense forward has an sm_90a kernel; the other
    /// calls (backward, varlen, KV cache) are unaffected.
    pub fn set_forward_arch(&mut self, arch: ForwardArch) {
        self.fwd_arch = arch;
    }

    /// The forward kernels this runtime runs ([`FlashAttention::set_forward_arch`]).
    pub fn forward_arch(&self) -> ForwardArch {
        self.fwd_arch
    }

    /// The entry name of the kernel that [`FlashAttention::forward`] runs for these
    /// arguments, and [`FlashAttention::forward_into`] with any `o` and `lse` its checks
    /// accept (they never change the choice): an sm_80 spec's name (`fa2_fwd_..._sm80`) or
    /// the sm_90a forward's (`fa3_fwd_..._sm90a`); `None` when the call launches nothing
    /// (batch, seqlen_q or heads 0). Runs the forward's checks (their errors, and
    /// [`FlashError::ArchUnavailable`] under [`ForwardArch::Sm90a`], and
    /// [`FlashError::KernelNotEmbedded`] where the forward would fail with it); loads and launches
    /// nothing. `stream` is the one the forward would run on: taking the tensors'
    /// addresses orders it after their pending writes, as the forward would.
    pub fn forward_kernel_name<T: Element>(
        &self,
        stream: &Arc<CudaStream>,
        q: &Tensor4<'_, T>,
        k: &Tensor4<'_, T>,
        v: &Tensor4<'_, T>,
        params: &AttnParams,
    ) -> Result<Option<String>> {
        self.check_ctx("stream", stream.context())?;
        self.check_ctx("q", q.view.stream().context())?;
        self.check_ctx("k", k.view.stream().context())?;
        self.check_ctx("v", v.view.stream().context())?;
        let (q_ptr, _q_guard) = q.view.device_ptr(stream);
        let (k_ptr, _k_guard) = k.view.device_ptr(stream);
        let (v_ptr, _v_guard) = v.view.device_ptr(stream);
        let (alibi, _alibi_guard) = self.alibi_arg(stream, params)?;
        let shape = q.shape();
        // o as `forward` allocates it: contiguous like q, at the (aligned) start of its
        // own buffer; the address is only checked for alignment, and never used
        let o = TensorDesc {
            shape,
            strides: contiguous_strides(shape),
            ptr: 0,
            len: prod(&shape),
            dtype: T::DTYPE,
        };
        let args = FwdArgs {
            q: q.desc(q_ptr),
            k: k.desc(k_ptr),
            v: v.desc(v_ptr),
            o,
            lse: None,
            params: *params,
            alibi,
        };
        let plan = plan_fwd_on(&args, self.arch, self.smem_optin)?;
        if plan.is_noop() {
            return Ok(None);
        }
        Ok(Some(match self.sm90_fwd_choice(&args)? {
            Some(call) => call.variant.name(),
            // the error the forward would fail with on a runtime that lacks the kernel
            None if !self.generates_on_demand() && !self.has_ptx(&plan.spec) => {
                return Err(FlashError::KernelNotEmbedded { spec: plan.spec });
            }
            None => plan.spec.name(),
        }))
    }

    /// The sm_90a launch of forward call `a` (already accepted by `plan_fwd_on`) when
    /// [`ForwardArch`] picks it, `None` for the sm_80 forward.
    pub(crate) fn sm90_fwd_choice(&self, a: &FwdArgs) -> Result<Option<Sm90FwdCall>> {
        let rt = Sm90Runtime {
            cc: self.cc,
            generates: self.generates_on_demand(),
            smem_optin: self.smem_optin,
            tma: crate::tensor_map::encoder_present(),
        };
        choose(self.fwd_arch, || {
            sm90_fwd_call_with(a, rt, &|v| self.has_sm90a_ptx(v))
        })
    }
}

/// [`ForwardArch`]'s choice given the sm_90a rule's answer (asked only where it matters):
/// `Some` runs the sm_90a forward, `None` the sm_80 one.
fn choose(
    arch: ForwardArch,
    rule: impl FnOnce() -> std::result::Result<Sm90FwdCall, String>,
) -> Result<Option<Sm90FwdCall>> {
    match arch {
        ForwardArch::Auto => Ok(rule().ok()),
        ForwardArch::Sm80 => Ok(None),
        ForwardArch::Sm90a => match rule() {
            Ok(call) => Ok(Some(call)),
            Err(why) => Err(FlashError::ArchUnavailable {
                arch: "ForwardArch::Sm90a",
                why,
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash_codegen::DType;

    /// The rule's answer for a contiguous bf16 d128 call on an H100.
    fn h100_call() -> Sm90FwdCall {
        let t = |s: usize, h: usize| TensorDesc {
            shape: [2, s, h, 128],
            strides: contiguous_strides([2, s, h, 128]),
            ptr: 1 << 20,
            len: 2 * s * h * 128,
            dtype: DType::Bf16,
        };
        let args = FwdArgs {
            q: t(300, 8),
            k: t(500, 2),
            v: t(500, 2),
            o: t(300, 8),
            lse: None,
            params: AttnParams::causal(),
            alibi: None,
        };
        let rt = Sm90Runtime {
            cc: (9, 0),
            generates: true,
            smem_optin: 227 << 10,
            tma: true,
        };
        crate::validate::sm90_fwd_call(&args, rt).expect("eligible")
    }

    #[test]
    fn auto_takes_sm90a_where_it_runs_and_sm80_elsewhere() {
        let call = h100_call();
        let ok = || Ok(call);
        let refused = || Err("head dim 96: the sm_90a forward takes 64 and 128".to_string());
        assert_eq!(choose(ForwardArch::Auto, ok).unwrap(), Some(call));
        assert_eq!(choose(ForwardArch::Auto, refused).unwrap(), None);
        assert_eq!(choose(ForwardArch::Sm90a, ok).unwrap(), Some(call));
    }

    #[test]
    fn sm80_never_asks_the_rule() {
        let never = || -> std::result::Result<Sm90FwdCall, String> { unreachable!() };
        assert_eq!(choose(ForwardArch::Sm80, never).unwrap(), None);
    }

    #[test]
    fn forced_sm90a_says_why_it_cannot() {
        let refused = || Err("head dim 96: the sm_90a forward takes 64 and 128".to_string());
        let err = choose(ForwardArch::Sm90a, refused).unwrap_err();
        assert!(matches!(err, FlashError::ArchUnavailable { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "ForwardArch::Sm90a cannot run this call: head dim 96: the sm_90a forward takes 64 \
             and 128 (ForwardArch::Auto runs the sm_80 forward where the sm_90a one cannot)"
        );
    }
}
