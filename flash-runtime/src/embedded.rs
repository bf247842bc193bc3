//! Runtime side of `flash_kernel!`: [`EmbeddedKernel`] (a spec and its PTX, embedded at
//! compile time), [`EmbeddedSm90aKernel`] (an sm_90a forward and its PTX), and where
//! [`crate::FlashAttention`] gets a kernel's PTX from.

use std::borrow::Cow;
use std::fmt;

use flash_codegen::kernels::sm90::fwd;
use flash_codegen::spec::HEAD_DIMS;
use flash_codegen::{KernelSpec, Pass, Scores};

use crate::attention::{FlashAttention, lock};
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

/// One sm_90a (Hopper: wgmma, TMA) forward kernel with its PTX, embedded in the binary at
/// compile time (by `flash_ptx::flash_kernel!` with `arch = sm90a` or `arch = [sm80,
/// sm90a]`, which makes a `SM90A_KERNELS` slice of these).
///
/// Give them to [`FlashAttention::register_sm90a_kernels`]: on compute capability 9.0 the
/// forward calls the sm_90a kernel can run ([`crate::ForwardArch::Auto`]) then run on this
/// PTX, also in a runtime that never generates code ([`FlashAttention::with_kernels`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedSm90aKernel {
    variant: fwd::Variant,
    ptx: &'static str,
}

impl EmbeddedSm90aKernel {
    /// `ptx` must be the module text of `variant` (its entry is named `variant.name()`), as
    /// `flash_codegen::manifest::sm90a::ptx(variant)` returns it (what `flash-codegen emit`
    /// writes); a wrong text fails when it is loaded.
    pub const fn new(variant: fwd::Variant, ptx: &'static str) -> Self {
        EmbeddedSm90aKernel { variant, ptx }
    }

    /// The variant (`fwd::Variant::shipping` for the kernels `flash_kernel!` embeds).
    pub const fn variant(&self) -> fwd::Variant {
        self.variant
    }

    /// Its PTX module text.
    pub const fn ptx(&self) -> &'static str {
        self.ptx
    }

    /// Its entry name (`fa3_fwd_..._sm90a`), the key it is registered under.
    pub fn name(&self) -> String {
        self.variant.name()
    }
}

impl fmt::Debug for EmbeddedSm90aKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedSm90aKernel")
            .field("variant", &self.variant.name())
            .field("ptx_bytes", &self.ptx.len())
            .finish()
    }
}

impl FlashAttention {
    /// Use the embedded PTX of these sm_90a forwards (e.g. a `flash_kernel!` module's
    /// `SM90A_KERNELS`) instead of generating it; in a runtime made by
    /// [`FlashAttention::with_kernels`], [`crate::ForwardArch::Auto`] then runs them on
    /// compute capability 9.0 for the calls they take. Registered by entry name; an entry
    /// already loaded keeps its module.
    pub fn register_sm90a_kernels(&self, kernels: &[EmbeddedSm90aKernel]) {
        let mut registered = lock(&self.registered_sm90a);
        for k in kernels {
            registered.insert(k.name(), k.ptx());
        }
    }

    /// Whether the sm_90a forward `variant`'s PTX is at hand: registered, or generated on
    /// demand.
    pub fn has_sm90a_ptx(&self, variant: &fwd::Variant) -> bool {
        self.generates_on_demand() || self.registered_sm90a_ptx(&variant.name()).is_some()
    }

    /// The registered PTX of the sm_90a entry `name`.
    pub(crate) fn registered_sm90a_ptx(&self, name: &str) -> Option<&'static str> {
        lock(&self.registered_sm90a).get(name).copied()
    }
}

/// What to add to a `flash_kernel!` invocation so that it embeds the sm_90a forward
/// `var`.
pub(crate) fn missing_sm90a_hint(var: &fwd::Variant) -> String {
    let mask = match var.window {
        true => "`passes = fwd_local`".to_string(),
        false => format!("`causal = {}` and `passes = fwd`", var.causal),
    };
    let scores = match var.scores {
        Scores::Plain => "",
        Scores::Softcap => ", `softcap = true`",
        Scores::Alibi => ", `alibi = true`",
    };
    format!(
        "add `arch = [sm80, sm90a]` (or `sm90a`), `head_dim = {}`, `dtype = {}`, \
         {mask}{scores} to the `flash_kernel!` invocation, or make the runtime with \
         `FlashAttention::new` to generate it on demand",
        var.head_dim,
        var.dtype.name(),
    )
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
         `flash_kernel!` invocation, with `sm80` in its `arch` (the default; list values \
         instantiate every combination), or make the \
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
    fn the_sm90a_error_says_what_to_add() {
        let var = fwd::Variant::shipping(DType::F16, 64, true);
        let msg = FlashError::Sm90aKernelNotEmbedded { variant: var }.to_string();
        assert!(
            msg.starts_with(&format!("sm_90a kernel `{}` is not embedded", var.name())),
            "{msg}"
        );
        assert!(
            msg.contains(
                "add `arch = [sm80, sm90a]` (or `sm90a`), `head_dim = 64`, `dtype = f16`, \
                 `causal = true` and `passes = fwd`"
            ),
            "{msg}"
        );
        // the sm80 hint names the arch its kernels need
        let msg = missing_kernel_hint(&spec(Pass::Fwd, 64, false));
        assert!(msg.contains("with `sm80` in its `arch`"), "{msg}");
    }

    #[test]
    fn debug_does_not_print_the_ptx() {
        let var = fwd::Variant::shipping(DType::Bf16, 128, false);
        let k = EmbeddedSm90aKernel::new(var, "01234");
        assert_eq!(k.name(), var.name());
        assert_eq!(
            format!("{k:?}"),
            format!(
                "EmbeddedSm90aKernel {{ variant: \"{}\", ptx_bytes: 5 }}",
                var.name()
            )
        );
        let k = EmbeddedKernel::new(spec(Pass::Fwd, 64, false), "0123456789");
        assert_eq!(
            format!("{k:?}"),
            "EmbeddedKernel { spec: \"fa2_fwd_d64_bf16_sm80\", ptx_bytes: 10 }"
        );
    }
}
