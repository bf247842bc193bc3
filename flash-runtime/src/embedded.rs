//! Runtime side of `flash_kernel!`: [`EmbeddedKernel`] (a spec and its PTX, embedded at
//! compile time) and where [`crate::FlashAttention`] gets a kernel's PTX from.

use std::borrow::Cow;
use std::fmt;

use flash_codegen::spec::HEAD_DIMS;
use flash_codegen::{KernelSpec, Pass};

use crate::error::{FlashError, Result};

/// One kernel variant with its PTX, embedded in the binary at compile time (by
/// `flash_ptx::flash_kernel!`, which makes a `KERNELS` slice of these).
///
/// Give them to [`crate::FlashAttention::with_kernels`] for a runtime that runs only these
/// and never generates code, or to [`crate::FlashAttention::register_kernels`] to use them
/// in place of generating those variants.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedKernel {
    spec: KernelSpec,
    ptx: &'static str,
}

impl EmbeddedKernel {
    /// `ptx` must be the module text of `spec` (its entry is named `spec.name()`), as
    /// `flash_codegen::generate(&spec)` returns it; a wrong text fails when it is loaded.
    pub const fn new(spec: KernelSpec, ptx: &'static str) -> Self {
        EmbeddedKernel { spec, ptx }
    }

    /// The variant.
    pub const fn spec(&self) -> KernelSpec {
        self.spec
    }

    /// Its PTX module text.
    pub const fn ptx(&self) -> &'static str {
        self.ptx
    }
}

impl fmt::Debug for EmbeddedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedKernel")
            .field("spec", &self.spec.name())
            .field("ptx_bytes", &self.ptx.len())
            .finish()
    }
}

/// The PTX of `spec`: the registered text if there is one, else generated when `generate`
/// is on, else [`FlashError::KernelNotEmbedded`].
pub(crate) fn ptx_source(
    spec: &KernelSpec,
    registered: Option<&'static str>,
    generate: bool,
) -> Result<Cow<'static, str>> {
    match registered {
        Some(ptx) => Ok(Cow::Borrowed(ptx)),
        None if generate => Ok(Cow::Owned(flash_codegen::generate(spec))),
        None => Err(FlashError::KernelNotEmbedded { spec: *spec }),
    }
}

/// What to add to a `flash_kernel!` invocation so that it embeds `spec`.
pub(crate) fn missing_kernel_hint(spec: &KernelSpec) -> String {
    let d = spec.head_dim;
    let lowest = HEAD_DIMS
        .iter()
        .copied()
        .filter(|&k| k < d)
        .max()
        .map_or(8, |below| below + 8);
    let dims = if lowest == d {
        format!("the kernel for head dim {d}")
    } else {
        format!("the kernel for head dims {lowest} to {d}")
    };
    let pass = match spec.pass {
        Pass::Fwd if spec.mask == flash_codegen::Mask::Local => "`passes = fwd_local`",
        Pass::Fwd => "`passes = fwd`",
        Pass::FwdSplit => "`passes = kvcache`",
        Pass::FwdPaged => "`passes = paged`",
        Pass::FwdCombine => "`passes = kvcache` (or `paged`)",
        Pass::BwdPre | Pass::Bwd | Pass::BwdDq | Pass::BwdPost | Pass::BwdKvSum => "`passes = bwd`",
        Pass::FwdVarlen => "`passes = varlen`",
        Pass::BwdPreVarlen | Pass::BwdVarlen | Pass::BwdDqVarlen | Pass::BwdPostVarlen => {
            "`passes = varlen_bwd`"
        }
    };
    let causal = match spec.pass.has_mask() && spec.mask != flash_codegen::Mask::Local {
        true => format!(", `causal = {}`", spec.mask.is_causal()),
        false => String::new(),
    };
    format!(
        "add `head_dim = {d}` ({dims}), `dtype = {}`{causal} and {pass} to the \
         `flash_kernel!` invocation (list values instantiate every combination), or make the \
         runtime with `FlashAttention::new` and `register_kernels` to generate missing kernels \
         on demand",
        spec.dtype.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash_codegen::{Arch, DType, Mask, Tiling};

    fn spec(pass: Pass, head_dim: u32, causal: bool) -> KernelSpec {
        KernelSpec {
            pass,
            head_dim,
            dtype: DType::Bf16,
            mask: Mask::causal(causal),
            scores: flash_codegen::Scores::Plain,
            tiling: Tiling::Standard,
            arch: Arch::Sm80,
        }
    }

    #[test]
    fn registered_ptx_wins_and_generation_is_optional() {
        let s = spec(Pass::BwdPost, 64, false);
        assert_eq!(ptx_source(&s, Some("x"), false).unwrap(), "x");
        assert_eq!(ptx_source(&s, Some("x"), true).unwrap(), "x");
        let generated = ptx_source(&s, None, true).unwrap();
        assert_eq!(generated, flash_codegen::generate(&s));
        let e = ptx_source(&s, None, false).unwrap_err();
        assert!(
            matches!(e, FlashError::KernelNotEmbedded { spec } if spec == s),
            "{e}"
        );
    }

    #[test]
    fn the_error_says_what_to_add() {
        let msg = FlashError::KernelNotEmbedded {
            spec: spec(Pass::Bwd, 96, true),
        }
        .to_string();
        assert!(msg.starts_with("kernel `fa2_bwd_d96_bf16_causal_sm80` is not embedded"));
        assert!(
            msg.contains("`head_dim = 96` (the kernel for head dims 72 to 96)"),
            "{msg}"
        );
        assert!(
            msg.contains("`dtype = bf16`, `causal = true` and `passes = bwd`"),
            "{msg}"
        );

        let msg = missing_kernel_hint(&spec(Pass::Fwd, 32, false));
        assert!(msg.contains("(the kernel for head dims 8 to 32)"), "{msg}");
        assert!(msg.contains("`causal = false` and `passes = fwd`"), "{msg}");
        // Elementwise backward kernels have no causal variant: nothing to say about it.
        let msg = missing_kernel_hint(&spec(Pass::BwdPre, 128, false));
        assert!(msg.contains("`dtype = bf16` and `passes = bwd`"), "{msg}");
        // the KV-cache kernels name their own keys
        let msg = missing_kernel_hint(&spec(Pass::FwdSplit, 128, true));
        assert!(
            msg.contains("`causal = true` and `passes = kvcache`"),
            "{msg}"
        );
        let msg = missing_kernel_hint(&spec(Pass::FwdPaged, 64, false));
        assert!(
            msg.contains("`causal = false` and `passes = paged`"),
            "{msg}"
        );
        let msg = missing_kernel_hint(&spec(Pass::FwdCombine, 64, false));
        assert!(
            msg.contains("`dtype = bf16` and `passes = kvcache` (or `paged`)"),
            "{msg}"
        );
    }

    #[test]
    fn debug_does_not_print_the_ptx() {
        let k = EmbeddedKernel::new(spec(Pass::Fwd, 64, false), "0123456789");
        assert_eq!(
            format!("{k:?}"),
            "EmbeddedKernel { spec: \"fa2_fwd_d64_bf16_sm80\", ptx_bytes: 10 }"
        );
    }
}
